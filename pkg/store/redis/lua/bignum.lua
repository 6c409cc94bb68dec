-- bignum: exact non-negative integers of any size for Redis Lua, whose
-- numbers are doubles (exact only below 2^53). A number is an array of
-- limbs in base B = 10^DIG, least significant first, with no leading zero
-- limbs (zero is {}). Every intermediate value stays below 2^53: a limb
-- product is below 10^14 and a quotient digit is estimated from two limbs,
-- so each step is exact. Decimal strings convert by slicing DIG digits.
local floor = math.floor
-- BN holds the functions, one local where there were nine, and the limbs'
-- helpers are local to this block: the chunk may hold at most 200 locals
-- (TestLuaLocals). Bignums serve the slow path only, where a field lookup
-- a call is nothing beside the limbs' arithmetic; the fast paths keep
-- their helpers as locals.
local BN = {}
do
  local DIG = 7
  local B = 10 ^ DIG

  local function norm(a)
    local n = #a
    while n > 0 and a[n] == 0 do a[n] = nil; n = n - 1 end
    return a
  end

  -- num parses a decimal string of digits (no sign).
  function BN.num(s)
    local a, n, i = {}, 0, #s
    while i > 0 do
      local j = i - DIG + 1
      if j < 1 then j = 1 end
      n = n + 1
      a[n] = tonumber(string.sub(s, j, i))
      i = j - 1
    end
    return norm(a)
  end

  -- small makes a number from a Lua integer below B.
  local function small(v)
    if v == 0 then return {} end
    return {v}
  end

  local PAD = '%0' .. DIG .. 'd'
  function BN.str(a)
    local n = #a
    if n == 0 then return '0' end
    local parts = {string.format('%d', a[n])}
    for i = n - 1, 1, -1 do parts[#parts + 1] = string.format(PAD, a[i]) end
    return table.concat(parts)
  end

  -- tonum converts a number below 2^53 to a Lua number.
  function BN.tonum(a)
    local v = 0
    for i = #a, 1, -1 do v = v * B + a[i] end
    return v
  end

  function BN.cmp(a, b)
    local na, nb = #a, #b
    if na ~= nb then
      if na < nb then return -1 end
      return 1
    end
    for i = na, 1, -1 do
      local x, y = a[i], b[i]
      if x ~= y then
        if x < y then return -1 end
        return 1
      end
    end
    return 0
  end

  function BN.iszero(a) return #a == 0 end

  function BN.add(a, b)
    local r, carry = {}, 0
    local n = #a
    if #b > n then n = #b end
    for i = 1, n do
      local t = (a[i] or 0) + (b[i] or 0) + carry
      if t >= B then r[i] = t - B; carry = 1 else r[i] = t; carry = 0 end
    end
    if carry > 0 then r[n + 1] = carry end
    return r
  end

  -- sub returns a - b; the caller guarantees a >= b.
  function BN.sub(a, b)
    local r, borrow = {}, 0
    for i = 1, #a do
      local t = a[i] - (b[i] or 0) - borrow
      if t < 0 then r[i] = t + B; borrow = 1 else r[i] = t; borrow = 0 end
    end
    return norm(r)
  end

  function BN.mul(a, b)
    local na, nb = #a, #b
    if na == 0 or nb == 0 then return {} end
    local r = {}
    for i = 1, na + nb do r[i] = 0 end
    for i = 1, na do
      local carry, ai = 0, a[i]
      if ai ~= 0 then
        for j = 1, nb do
          local k = i + j - 1
          local t = r[k] + ai * b[j] + carry -- < 10^7 + 10^14 + 10^7
          carry = floor(t / B)
          r[k] = t - carry * B
        end
      end
      r[i + nb] = carry
    end
    return norm(r)
  end

  -- mulsmall returns a * m for an integer 0 <= m <= B.
  local function mulsmall(a, m)
    local r, carry = {}, 0
    for i = 1, #a do
      local t = a[i] * m + carry
      carry = floor(t / B)
      r[i] = t - carry * B
    end
    local n = #a
    while carry > 0 do
      n = n + 1
      local c = floor(carry / B)
      r[n] = carry - c * B
      carry = c
    end
    return norm(r)
  end

  -- divmod returns a / b and a % b (b > 0): short division for a one-limb
  -- divisor, else Knuth's algorithm D (TAOCP 4.3.1) in base B.
  function BN.divmod(a, b)
    local n = #b
    if BN.cmp(a, b) < 0 then return {}, a end
    if n == 1 then
      local d, q, r = b[1], {}, 0
      for i = #a, 1, -1 do
        local t = r * B + a[i] -- r < d < B, so t < B^2
        local qi = floor(t / d)
        q[i] = qi
        r = t - qi * d
      end
      return norm(q), small(r)
    end
    -- Normalize so that the divisor's top limb is at least B/2.
    local f = floor(B / (b[n] + 1))
    local u, v = mulsmall(a, f), mulsmall(b, f)
    local m = #a - n -- quotient has m+1 limbs
    for i = #u + 1, #a + 1 do u[i] = 0 end
    local vt, vs = v[n], v[n - 1]
    local q = {}
    for j = m, 0, -1 do
      -- u and v are 1-indexed: limb k of the text is u[k+1].
      local num2 = u[j + n + 1] * B + u[j + n]
      local qh = floor(num2 / vt)
      local rh = num2 - qh * vt
      while qh >= B or qh * vs > rh * B + u[j + n - 1] do
        qh = qh - 1
        rh = rh + vt
        if rh >= B then break end
      end
      -- u[j..j+n] -= qh * v
      local borrow, carry = 0, 0
      for i = 1, n do
        local p = qh * v[i] + carry
        carry = floor(p / B)
        local t = u[i + j] - (p - carry * B) - borrow
        if t < 0 then u[i + j] = t + B; borrow = 1 else u[i + j] = t; borrow = 0 end
      end
      local t = u[j + n + 1] - carry - borrow
      if t < 0 then
        -- qh was one too large: add v back.
        qh = qh - 1
        local c = 0
        for i = 1, n do
          local s = u[i + j] + v[i] + c
          if s >= B then u[i + j] = s - B; c = 1 else u[i + j] = s; c = 0 end
        end
        t = t + c
      end
      u[j + n + 1] = t
      q[j + 1] = qh
    end
    -- The remainder is u[1..n] / f.
    local r = {}
    for i = 1, n do r[i] = u[i] end
    norm(r)
    local rq = BN.divmod(r, small(f))
    return norm(q), rq
  end
end

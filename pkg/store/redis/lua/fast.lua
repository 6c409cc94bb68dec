-- fast: pkg/bucket's arithmetic on plain Lua numbers (doubles), for the
-- usual bucket whose every operand and intermediate is an integer below
-- FAST_LIMIT (2^52), where doubles are exact. A fast state is
-- {t = tokens, f = frac, a = cursor} with the cursor counted from now (the
-- script's instant is 0, so a cursor ahead of now is positive); params are
-- {c = capacity, n = rate tokens, p = rate period in ns}.
--
-- Why it is exact: a bucket is fast only when c*p < FAST_LIMIT (the store
-- sends its parameters packed only then; see itemFast), so every
-- balance in units (t*p + f), every room and every missing amount is below
-- it; an elapsed time is below FAST_LIMIT too (fastrel). The one product
-- that can exceed it, elapsed*n, is only compared with a room below
-- FAST_LIMIT: a rounded product is at least 2^53 exactly when the true one
-- is, so the comparison is exact. Division rounds, so fdiv corrects the
-- quotient by one either way; q*b stays an exact integer below 2^53.
local function fdiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  if r < 0 then
    q, r = q - 1, r + b
  elseif r >= b then
    q, r = q + 1, r - b
  end
  return q, r
end

-- fms is ns in whole ms, rounded up.
local function fms(ns)
  local q, r = fdiv(ns, 1e6)
  if r > 0 then q = q + 1 end
  return q
end

local function frefill(p, s)
  if s.a >= 0 then return s end
  if s.t >= p.c then return {t = p.c, f = 0, a = 0} end
  local room = (p.c - s.t) * p.p
  local g = -s.a * p.n
  if g >= room then return {t = p.c, f = 0, a = 0} end
  g = g + s.f
  if g >= room then return {t = p.c, f = 0, a = 0} end
  if g < p.p then return {t = s.t, f = g, a = 0} end
  local q, r = fdiv(g, p.p)
  return {t = s.t + q, f = r, a = 0}
end

-- funtil: ns until s holds want tokens, from its cursor, then from now.
local function funtil(p, s, want)
  if s.t >= want then return 0 end
  local q, r = fdiv((want - s.t) * p.p - s.f, p.n)
  if r > 0 then q = q + 1 end
  if s.a > 0 then q = q + s.a end
  return q
end

local function funtilfull(p, s) return funtil(p, s, p.c) end

-- fdecide mirrors bucket.Params.Decide: the new state, allowed, never,
-- remaining, retry.
local function fdecide(p, s, cost)
  if cost > p.c then return s, false, true, frefill(p, s).t, 0 end
  s = frefill(p, s)
  if cost <= 0 then
    local t = s.t - cost
    if cost < -p.c or t >= p.c then return {t = p.c, f = 0, a = s.a}, true, false, p.c, 0 end
    return {t = t, f = s.f, a = s.a}, true, false, t, 0
  end
  if s.t >= cost then
    local t = s.t - cost
    return {t = t, f = s.f, a = s.a}, true, false, t, 0
  end
  return s, false, false, s.t, funtil(p, s, cost)
end

-- fast: pkg/bucket's arithmetic on plain Lua numbers (doubles), for the
-- usual bucket whose every operand and intermediate is an integer below
-- FAST_LIMIT (2^52), where doubles are exact. A fast state is
-- {t = tokens, f = frac, a = cursor} with the cursor counted from now (the
-- script's instant is 0, so a cursor ahead of now is positive); params are
-- {c = capacity, n = rate tokens, p = rate period in ns, d = max debt}.
-- Tokens are signed: a balance in debt (-d <= t < 0) is floored as
-- bucket.State keeps it, its fraction f still in [0, p).
--
-- Why it is exact: a bucket is fast only when (c+d)*p < FAST_LIMIT (the
-- store sends its parameters packed only then; see itemFast). A budget's
-- n is 0 and p 1: frefill only moves its cursor (no gain, less than a
-- token), and funtil returns before dividing by n. A balance
-- lies in [-d, c], so every balance in units (t*p + f) is within
-- FAST_LIMIT of zero, and every room ((c-t)*p) and every missing amount
-- ((want-t)*p - f for want in 1..c) is below FAST_LIMIT; a report's
-- charge is at most t+d <= c+d; an elapsed time is below FAST_LIMIT too
-- (fastrel). The one product
-- that can exceed it, elapsed*n, is only compared with a room below
-- FAST_LIMIT: a rounded product is at least 2^53 exactly when the true one
-- is, so the comparison is exact. Division rounds, so fdiv corrects the
-- remainder by b either way: Lua's a % b is a - floor(a/b)*b, the
-- quotient floor(a/b) off by at most one and its product with b an exact
-- integer below 2^53. The quotient is then (a - r) / b, a multiple of b
-- divided, which is exact. The operator, not math.floor: no call.
local function fdiv(a, b)
  local r = a % b
  if r < 0 then
    r = r + b
  elseif r >= b then
    r = r - b
  end
  return (a - r) / b, r
end

-- fms is ns in whole ms, rounded up.
local function fms(ns)
  local q, r = fdiv(ns, 1e6)
  if r > 0 then q = q + 1 end
  return q
end

-- A state is passed as its three numbers t, f, a (no table per step).
local function frefill(p, t, f, a)
  if a >= 0 then return t, f, a end
  if t >= p.c then return p.c, 0, 0 end
  local room = (p.c - t) * p.p
  local g = -a * p.n
  if g >= room then return p.c, 0, 0 end
  g = g + f
  if g >= room then return p.c, 0, 0 end
  if g < p.p then return t, g, 0 end
  local q, r = fdiv(g, p.p)
  return t + q, r, 0
end

-- funtil: ns until the state holds want tokens, from its cursor, then
-- from now. A budget's (rate 0) lacking tokens never has them: its wait is
-- bucket.MaxDuration, as a decimal (no double holds it), which the reply
-- carries as it carries the bignum path's.
local function funtil(p, t, f, a, want)
  if t >= want then return 0 end
  if p.n == 0 then return '9223372036854775807' end
  local q, r = fdiv((want - t) * p.p - f, p.n)
  if r > 0 then q = q + 1 end
  if a > 0 then q = q + a end
  return q
end

local function funtilfull(p, t, f, a) return funtil(p, t, f, a, p.c) end

-- fdecide, fcheck and freport decide an item (store.Charge) on a state
-- refilled to now, as bucket.Params' methods do once they refill it:
-- every caller's state is so (a loaded bucket is refilled as it loads, a
-- new one's cursor is not behind now, a decided state stays refilled),
-- and frefill leaves such a state as it is, so they do not call it
-- again. Their helper is local to the block (the chunk's locals:
-- TestLuaLocals).
local fdecide, fcheck, freport
do
-- frefund adds -cost (cost <= 0) to a refilled state, capped at
  -- capacity (bucket.Params.refund): the new tokens. A cost below -(c+d)
  -- fills any balance (a cost far below may not be exact as a number).
  local function frefund(p, t, cost)
    local left = t - cost
    if cost < -(p.c + p.d) or left >= p.c then return p.c end
    return left
  end

  -- fdecide mirrors bucket.Params.Decide: the new state (t, f, a), allowed,
  -- never, tokens (signed: the reply's remaining), retry.
  function fdecide(p, t, f, a, cost)
    if cost > p.c then return t, f, a, false, true, t, 0 end
    if cost <= 0 then
      t = frefund(p, t, cost)
      if t >= p.c then f = 0 end
      return t, f, a, true, false, t, 0
    end
    if t >= cost then return t - cost, f, a, true, false, t - cost, 0 end
    return t, f, a, false, false, t, funtil(p, t, f, a, cost)
  end

  -- fcheck mirrors bucket.Params.Check: the refilled state, allowed (one
  -- whole token there), tokens, retry (until one is).
  function fcheck(p, t, f, a)
    if t >= 1 then return t, f, a, true, t, 0 end
    return t, f, a, false, t, funtil(p, t, f, a, 1)
  end

  -- freport mirrors bucket.Params.Report: the new state, allowed (the
  -- balance still at zero or above), tokens, retry, forgiven and what it
  -- charged (a refund: 0 and 0). Forgiven is exact for a cost below 2^53
  -- (every cost of a compact call: maxExact), charged always is.
  function freport(p, t, f, a, cost)
    local charged, forgiven = 0, 0
    if cost <= 0 then
      t = frefund(p, t, cost)
      if t >= p.c then f = 0 end
    else
      charged = t + p.d
      if cost < charged then charged = cost end
      t, forgiven = t - charged, cost - charged
    end
    if t >= 0 then return t, f, a, true, t, 0, forgiven, charged end
    return t, f, a, false, t, funtil(p, t, f, a, 1), forgiven, charged
  end
end

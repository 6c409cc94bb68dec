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
-- from now.
local function funtil(p, t, f, a, want)
  if t >= want then return 0 end
  local q, r = fdiv((want - t) * p.p - f, p.n)
  if r > 0 then q = q + 1 end
  if a > 0 then q = q + a end
  return q
end

local function funtilfull(p, t, f, a) return funtil(p, t, f, a, p.c) end

-- fdecide mirrors bucket.Params.Decide: the new state (t, f, a), allowed,
-- never, remaining, retry.
local function fdecide(p, t, f, a, cost)
  if cost > p.c then
    local rt = frefill(p, t, f, a)
    return t, f, a, false, true, rt, 0
  end
  t, f, a = frefill(p, t, f, a)
  if cost <= 0 then
    local left = t - cost
    if cost < -p.c or left >= p.c then return p.c, 0, a, true, false, p.c, 0 end
    return left, f, a, true, false, left, 0
  end
  if t >= cost then return t - cost, f, a, true, false, t - cost, 0 end
  return t, f, a, false, false, t, funtil(p, t, f, a, cost)
end

-- bucket: pkg/bucket's arithmetic on bignums, line for line. A state is
-- {t = tokens, f = frac, a = cursor}, params are {c = capacity, n = rate
-- tokens, p = rate period in ns}; every field is a bignum.
local full, refill, untilfull, decide, transition, units, fromunits
-- Helpers are local to this block (the library's chunk may hold at most
-- 200 locals), the bignum functions too.
do
  local num, cmp, iszero, add, sub, mul, divmod = BN.num, BN.cmp, BN.iszero, BN.add, BN.sub, BN.mul, BN.divmod
  local ZERO = {}
  local MAXD = num('9223372036854775807') -- bucket.MaxDuration

  local function copy(s) return {t = s.t, f = s.f, a = s.a} end

  function full(p, now) return {t = p.c, f = ZERO, a = now} end

  local function sameparams(x, y)
    return cmp(x.c, y.c) == 0 and cmp(x.n, y.n) == 0 and cmp(x.p, y.p) == 0
  end

  -- refill: min(capacity, s + (now-a)*rate); a now at or before the cursor
  -- means no time passed.
  function refill(p, s, now)
    if cmp(now, s.a) <= 0 then return s end
    local elapsed = sub(now, s.a)
    s = {t = s.t, f = s.f, a = now}
    if cmp(s.t, p.c) >= 0 then s.t, s.f = p.c, ZERO; return s end
    local gain = add(mul(elapsed, p.n), s.f)
    local room = mul(sub(p.c, s.t), p.p)
    if cmp(gain, room) >= 0 then s.t, s.f = p.c, ZERO; return s end
    if cmp(gain, p.p) < 0 then s.f = gain; return s end
    local q, r = divmod(gain, p.p)
    s.t, s.f = add(s.t, q), r
    return s
  end

  -- untilhas: ns until s holds want tokens, counted from its cursor,
  -- saturated at MAXD.
  local function untilhas(p, s, want)
    if cmp(s.t, want) >= 0 then return ZERO end
    local missing = sub(mul(sub(want, s.t), p.p), s.f)
    local q, r = divmod(missing, p.n)
    if not iszero(r) then q = add(q, {1}) end
    if cmp(q, MAXD) > 0 then return MAXD end
    return q
  end

  -- since turns d, counted from the cursor at, into a duration from now.
  local function since(d, at, now)
    if iszero(d) or cmp(now, at) >= 0 then return d end
    local v = add(d, sub(at, now))
    if cmp(v, MAXD) > 0 then return MAXD end
    return v
  end

  function untilfull(p, s, now) return since(untilhas(p, s, p.c), s.a, now) end

  -- decide: cost is {neg = bool, m = magnitude}. Returns the new state and
  -- allowed, never, remaining (bignum), retry (bignum).
  function decide(p, s, now, cost)
    if not cost.neg and cmp(cost.m, p.c) > 0 then
      return s, false, true, refill(p, s, now).t, ZERO
    end
    s = copy(refill(p, s, now))
    if cost.neg or iszero(cost.m) then
      local t = add(s.t, cost.m)
      if cmp(t, p.c) >= 0 then
        s.t, s.f = p.c, ZERO
      else
        s.t = t
      end
    elseif cmp(s.t, cost.m) >= 0 then
      s.t = sub(s.t, cost.m)
    else
      return s, false, false, s.t, since(untilhas(p, s, cost.m), s.a, now)
    end
    return s, true, false, s.t, ZERO
  end

  -- transition: refill with the old params up to at, then convert the
  -- balance (mode 'scale' or 'clamp'); the cursor stays at max(a, at).
  function transition(s, from, to, at, mode)
    s = refill(from, s, at)
    if sameparams(from, to) then return s end
    s = copy(s)
    if mode == 'scale' then
      local units = add(mul(s.t, from.p), s.f)
      units = mul(mul(units, to.c), to.p)
      units = divmod(units, mul(from.c, from.p))
      s.t, s.f = divmod(units, to.p)
      if cmp(s.t, to.c) >= 0 then s.t, s.f = to.c, ZERO end
      return s
    end
    if cmp(s.t, to.c) >= 0 then s.t, s.f = to.c, ZERO; return s end
    if not iszero(s.f) then s.f = divmod(mul(s.f, to.p), from.p) end
    return s
  end

  -- units is the balance in 1/p of a token; fromunits is its inverse,
  -- capped at capacity.
  function units(p, s) return add(mul(s.t, p.p), s.f) end
  function fromunits(p, u, at)
    if cmp(u, mul(p.c, p.p)) >= 0 then return {t = p.c, f = ZERO, a = at} end
    local t, f = divmod(u, p.p)
    return {t = t, f = f, a = at}
  end
end

-- bucket: pkg/bucket's arithmetic on bignums, line for line. A state is
-- {t = tokens, f = frac, a = cursor}, params are {c = capacity, n = rate
-- tokens, p = rate period in ns, d = max debt, cap = capacity less the
-- debt bound, dn = d as a number}; every field but dn is a bignum.
--
-- Bignums are never negative, so a state's tokens are shifted by the
-- debt bound: t is the balance plus d (0 at -MaxDebt), and c the
-- capacity plus d (bigparams). Refill, the time until a balance and the
-- cap at capacity are then pkg/bucket's as they are, on shifted values:
-- the fraction of a floored balance is the same, shifted by whole tokens.
-- Only what names a balance (a cost covered, one token for a check, zero
-- for a report, a transition) adds d. With no debt bound (pre-paid) the
-- shift is 0.
local full, refill, untilfull, decide, check, report, transition, units, fromunits
-- Helpers are local to this block (the library's chunk may hold at most
-- 200 locals), the bignum functions too.
do
  local num, cmp, iszero, add, sub, mul, divmod = BN.num, BN.cmp, BN.iszero, BN.add, BN.sub, BN.mul, BN.divmod
  local ZERO, ONE = {}, {1}
  local MAXD = num('9223372036854775807') -- bucket.MaxDuration

  local function copy(s) return {t = s.t, f = s.f, a = s.a} end

  function full(p, now) return {t = p.c, f = ZERO, a = now} end

  local function sameparams(x, y)
    return cmp(x.c, y.c) == 0 and cmp(x.n, y.n) == 0 and cmp(x.p, y.p) == 0 and cmp(x.d, y.d) == 0
  end

  -- refill: min(capacity, s + (now-a)*rate); a now at or before the cursor
  -- means no time passed. A budget's (rate 0) only moves the cursor.
  function refill(p, s, now)
    if cmp(now, s.a) <= 0 then return s end
    local elapsed = sub(now, s.a)
    s = {t = s.t, f = s.f, a = now}
    if cmp(s.t, p.c) >= 0 then s.t, s.f = p.c, ZERO; return s end
    if iszero(p.n) then return s end -- a budget: nothing comes back
    local gain = add(mul(elapsed, p.n), s.f)
    local room = mul(sub(p.c, s.t), p.p)
    if cmp(gain, room) >= 0 then s.t, s.f = p.c, ZERO; return s end
    if cmp(gain, p.p) < 0 then s.f = gain; return s end
    local q, r = divmod(gain, p.p)
    s.t, s.f = add(s.t, q), r
    return s
  end

  -- untilhas: ns until s holds want tokens (shifted), counted from its
  -- cursor, saturated at MAXD; a budget's lacking tokens never has them.
  local function untilhas(p, s, want)
    if cmp(s.t, want) >= 0 then return ZERO end
    if iszero(p.n) then return MAXD end
    local missing = sub(mul(sub(want, s.t), p.p), s.f)
    local q, r = divmod(missing, p.n)
    if not iszero(r) then q = add(q, ONE) end
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

  -- untilone: ns from now until s holds one whole token (a check passes).
  local function untilone(p, s, now) return since(untilhas(p, s, add(p.d, ONE)), s.a, now) end

  -- refund adds the magnitude m of a cost <= 0 to s (a copy), capped at
  -- capacity.
  local function refund(p, s, m)
    local t = add(s.t, m)
    if cmp(t, p.c) >= 0 then
      s.t, s.f = p.c, ZERO
    else
      s.t = t
    end
  end

  -- decide: cost is {neg = bool, m = magnitude}. Returns the new state and
  -- allowed, never, tokens (shifted bignum), retry (bignum).
  function decide(p, s, now, cost)
    if not cost.neg and cmp(cost.m, p.cap) > 0 then
      return s, false, true, refill(p, s, now).t, ZERO
    end
    s = copy(refill(p, s, now))
    if cost.neg or iszero(cost.m) then
      refund(p, s, cost.m)
    else
      local want = add(cost.m, p.d)
      if cmp(s.t, want) < 0 then return s, false, false, s.t, since(untilhas(p, s, want), s.a, now) end
      s.t = sub(s.t, cost.m)
    end
    return s, true, false, s.t, ZERO
  end

  -- check: the refilled state, whether it holds a whole token, its
  -- tokens and the time until it does.
  function check(p, s, now)
    s = refill(p, s, now)
    if cmp(s.t, p.d) > 0 then return s, true, s.t, ZERO end
    return s, false, s.t, untilone(p, s, now)
  end

  -- report: charged down to -d at most (shifted: down to 0), the rest
  -- forgiven. Returns the new state, allowed (at zero or above), tokens,
  -- retry and forgiven (bignum).
  function report(p, s, now, cost)
    s = copy(refill(p, s, now))
    local forgiven = ZERO
    if cost.neg or iszero(cost.m) then
      refund(p, s, cost.m)
    elseif cmp(cost.m, s.t) > 0 then
      forgiven, s.t = sub(cost.m, s.t), ZERO
    else
      s.t = sub(s.t, cost.m)
    end
    if cmp(s.t, p.d) >= 0 then return s, true, s.t, ZERO, forgiven end
    return s, false, s.t, untilone(p, s, now), forgiven
  end

  -- transition: refill with the old params up to at, then convert the
  -- balance (mode 'scale' or 'clamp'); the cursor stays at max(a, at). A
  -- debt carries over in tokens under either mode, clamped to the new
  -- bound; scale scales only a balance at zero or above. To or from a
  -- budget, scale keeps whole tokens, and a fraction converts to 0 (a
  -- budget's p is 1: bigparams).
  function transition(s, from, to, at, mode)
    s = refill(from, s, at)
    if sameparams(from, to) then return s end
    s = copy(s)
    local debt = cmp(s.t, from.d) < 0
    if mode == 'scale' and not debt and (iszero(from.n) or iszero(to.n)) then
      -- A budget has no fraction: whole tokens, rounded down.
      s.t, s.f = add(divmod(mul(sub(s.t, from.d), to.cap), from.cap), to.d), ZERO
      return s
    end
    if mode == 'scale' and not debt then
      local u = add(mul(sub(s.t, from.d), from.p), s.f)
      u = mul(mul(u, to.cap), to.p)
      u = divmod(u, mul(from.cap, from.p))
      local t, f = divmod(u, to.p)
      if cmp(t, to.cap) >= 0 then t, f = to.cap, ZERO end
      s.t, s.f = add(t, to.d), f
      return s
    end
    if debt then
      local owed = sub(from.d, s.t)
      if cmp(owed, to.d) > 0 then s.t, s.f = ZERO, ZERO; return s end
      s.t = sub(to.d, owed)
    else
      local t = sub(s.t, from.d)
      if cmp(t, to.cap) >= 0 then s.t, s.f = to.c, ZERO; return s end
      s.t = add(t, to.d)
    end
    if not iszero(s.f) then s.f = divmod(mul(s.f, to.p), from.p) end
    return s
  end

  -- units is the balance in 1/p of a token (shifted); fromunits is its
  -- inverse, capped at capacity.
  function units(p, s) return add(mul(s.t, p.p), s.f) end
  function fromunits(p, u, at)
    if cmp(u, mul(p.c, p.p)) >= 0 then return {t = p.c, f = ZERO, a = at} end
    local t, f = divmod(u, p.p)
    return {t = t, f = f, a = at}
  end
end

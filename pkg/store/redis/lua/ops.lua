-- ops: the script's operations, one named function each, behind the one
-- dispatch at the end: decide and reserve (decideop) and settle
-- (settleop) buckets that live in one hash slot. See doc.go for the
-- design and contract.go for every layout.
local function raise(a)
  if not forgot or deccmp(a, forgot) > 0 then forgot = a end
end

-- An engine decides a bucket in plain numbers (FAST) or in bignums (BIG);
-- a bucket's engine is chosen when it is loaded. Each decides an item
-- (decide, check, report) on a state; tokens gives a balance's whole
-- tokens as a signed number (the reply's remaining: below zero, a debt);
-- pack a state's record numbers: tokens, fraction (h, l), cursor (h, l).
-- A report's forgiven is a number or a decimal.
local FAST = {
  decide = function(p, s, cost)
    local t, f, a, ok, never, rem, retry = fdecide(p, s.t, s.f, s.a, cost)
    return {t = t, f = f, a = a}, ok, never, rem, retry
  end,
  check = function(p, s)
    local t, f, a, ok, rem, retry = fcheck(p, s.t, s.f, s.a)
    return {t = t, f = f, a = a}, ok, rem, retry
  end,
  -- A cost of FAST_LIMIT or more (the general path's, from a decimal)
  -- may not be exact as a number: its forgiven is worked out on the
  -- decimal.
  report = function(p, s, cost, dec)
    local t, f, a, ok, rem, retry, forgiven, charged = freport(p, s.t, s.f, s.a, cost)
    if cost >= FAST_LIMIT then forgiven = BN.str(BN.sub(BN.num(dec), BN.num(string.format('%.0f', charged)))) end
    return {t = t, f = f, a = a}, ok, rem, retry, forgiven
  end,
  tokens = function(_, t) return t end,
  untilfull = function(p, s) return funtilfull(p, s.t, s.f, s.a) end,
  cost = tonumber,
  out = function(x) return x end,
  full = function(p, s) return s.t >= p.c end,
  zero = function(x) return x == 0 end,
  pack = function(_, s) return fpack(s.t, s.f, s.a) end,
  cursor = function(s) return hldec(fastabs(s.a)) end,
  ms = fms,
}
local BIG = {
  decide = function(p, s, cost) return decide(p, s, nowbig(), cost) end,
  check = function(p, s) return check(p, s, nowbig()) end,
  report = function(p, s, cost)
    local st, ok, rem, retry, forgiven = report(p, s, nowbig(), cost)
    return st, ok, rem, retry, BN.str(forgiven)
  end,
  tokens = function(p, t) return BN.tonum(t) - p.dn end,
  untilfull = function(p, s) return untilfull(p, s, nowbig()) end,
  cost = signed,
  out = BN.str,
  full = function(p, s) return BN.cmp(s.t, p.c) >= 0 end,
  zero = BN.iszero,
  pack = function(p, s)
    local fh, fl = bighl(s.f)
    local ah, al = bighl(s.a)
    return BN.tonum(s.t) - p.dn, fh, fl, ah, al
  end,
  cursor = function(s) return BN.str(s.a) end,
  ms = function(ns)
    local q, r = BN.divmod(ns, {1000000})
    if not BN.iszero(r) then q = BN.add(q, {1}) end
    return BN.tonum(q)
  end,
}

-- bigstate is a record's balance as bignums under params p: its tokens
-- shifted by the debt bound (bucket.lua), exact since |t| and d are at
-- most 10^15.
local function bigstate(p, t, fh, fl, ah, al)
  return {t = BN.num(string.format('%.0f', t + p.dn)), f = hlbig(fh, fl), a = hlbig(ah, al)}
end

-- Item b is the ARGV index before an item's arguments.
local function fastparams(b)
  local fp = ARGV[b + ITEM_FAST]
  if fp == '' then return nil end
  local c, n, p, d = struct.unpack(FAST_FORMAT, fp)
  return {c = c, n = n, p = p, d = d}
end

-- work is a bucket's working state: its engine, parameters, state as
-- loaded and then charged its reports (s) and as decided so far (cur),
-- the identity and activation of the version it is decided under, the
-- instant its key surely lives to, whether it is new or changed by
-- loading or a report (dirty), its last item's result (last), its
-- reservations' mark (hold: holds.lua), the ARGV index before the item
-- that reserves it now (reserve), if any, and how long (ms) the hash must
-- live for it (holdms), and the ms its key lives for a version with a
-- horizon (horizon: a calendar budget's, whose bucket never fills). Every
-- field is set here, at once: a Lua table that grows field by field is
-- rehashed at every power of two.
local function work(E, p, s, id, vh, vl, exp, new, dirty)
  return {E = E, p = p, s = s, cur = s, id = id, vh = vh, vl = vl, exp = exp, new = new, dirty = dirty,
    key = false, idx = 0, b = 0, charged = false, reseta = false, resetr = false, last = false,
    hold = false, reserve = false, holdms = false, horizon = false}
end

-- newbucket is a bucket not stored yet: full, its cursor at now or, if
-- later, at FLOOR.
local function newbucket(b, big)
  local id = ARGV[b + ITEM_ID]
  local p = not big and fastparams(b)
  if p then
    local a = 0
    if FLOOR ~= '' then a = fastrel(split(FLOOR)) end
    if a then
      if a < 0 then a = 0 end
      return work(FAST, p, {t = p.c, f = 0, a = a}, id, false, false, false, true, false)
    end
  end
  local _, c, n, per = readid(id)
  local bp, at = bigparams(c, n, per), nowbig()
  if FLOOR ~= '' and BN.cmp(BN.num(FLOOR), at) > 0 then at = BN.num(FLOOR) end
  return work(BIG, bp, full(bp, at), id, false, false, false, true, false)
end

-- convert decides which version a stored bucket of another version is
-- decided under: the item's when it was applied later (this process's by
-- version ID, whose chain is walked as bucket.Version.Bring does; another
-- process's by activation on the shared clock), else the stored one: a
-- bucket never moves back to parameters it has left. Revisions do not
-- order versions: a rollback (a lower revision applied after a higher
-- one) applies, as in the memory store.
local function convert(b, rec, vh, vl, exp, ident)
  local now = nowbig()
  local _, sc, sn, sp, spid, svid = readid(ident)
  local id = ARGV[b + ITEM_ID]
  local _, c, n, per, _, vid = readid(id)
  local from = bigparams(sc, sn, sp)
  local s = bigstate(from, rec[1], rec[2], rec[3], rec[4], rec[5])
  local at = back(signed(ARGV[b + ITEM_AT]))
  local move, walk = false, false
  if spid == PID then
    if deccmp(vid, svid) > 0 then move, walk = true, true end
  elseif BN.cmp(at, hlbig(vh, vl)) > 0 then
    move = true
  end
  if not move then return work(BIG, from, refill(from, s, now), ident, vh, vl, exp, false, false) end
  local to, mode, done = bigparams(c, n, per), string.sub(ARGV[b + ITEM_MODE], 1, RESIZE_BYTES), false
  local chainarg = ARGV[b + ITEM_CHAIN]
  if walk and chainarg ~= '' then
    local ch = chain(chainarg, at)
    for k = 1, #ch do
      if ch[k].v == svid then
        for j = k - 1, 1, -1 do s = transition(s, ch[j + 1].p, ch[j].p, ch[j].at, ch[j].mode) end
        s = transition(s, ch[1].p, to, at, mode)
        done = true
        break
      end
    end
  end
  if not done then s = transition(s, from, to, at, mode) end
  local ah, al = bighl(at)
  return work(BIG, to, refill(to, s, now), id, ah, al, exp, false, true)
end

-- load is the bucket stored as rec brought to the version it is decided
-- under and refilled to now: {E, p, s, identity, new, dirty}. A bucket
-- of the item's version, or of another process's at the same revision
-- with the same parameters (the usual case), needs no conversion.
local function load(b, rec, big)
  if not rec then return newbucket(b, big) end
  local t, fh, fl, ah, al, vh, vl, exp, ident = readrec(rec)
  if ident ~= ARGV[b + ITEM_ID] then
    local ver = ARGV[b + ITEM_VERSION]
    local n = #ver
    if string.sub(ident, 1, n) ~= ver or string.sub(ident, n + 1, n + #PID) == PID then
      return convert(b, {t, fh, fl, ah, al}, vh, vl, exp, ident)
    end
  end
  local p = not big and fastparams(b)
  local a = p and fastrel(ah, al)
  if a then
    local rt, rf, ra = frefill(p, t, fh * 1e9 + fl, a)
    return work(FAST, p, {t = rt, f = rf, a = ra}, ident, vh, vl, exp, false, false)
  end
  local _, c, n, per = readid(ident)
  local bp = bigparams(c, n, per)
  return work(BIG, bp, refill(bp, bigstate(bp, t, fh, fl, ah, al), nowbig()), ident, vh, vl, exp, false, false)
end

-- put writes a bucket's state st; ttl is its time until full. With expiry
-- the key lives at least that long, a full bucket is deleted, and a state
-- that is only a refill of the stored one (not dirty) is not written: the
-- stored one refills to the same balance and is full at the same
-- instant. The key lives at least ARG_TOLERANCE ms past the bucket's full
-- instant, so that a forward step of the Redis host's wall clock (which
-- expiry runs on) up to that much expires no bucket early: PX is the time
-- until full and twice the tolerance, and is kept (KEEPTTL, a cheaper
-- write) while it still covers the time until full and one tolerance;
-- the record holds the instant, on the shared clock, it was set to cover.
-- Without expiry (tests that drive time) every bucket is written, except
-- a new full one, whose cursor is reported instead. A bucket with
-- reservations is never deleted nor left unstored as full (it still owes
-- them back), its record carries their mark, and their hash lives as long
-- as the record. A version with a horizon (ITEM_HORIZON) sets the time
-- until full aside: its key lives until the horizon and the tolerance.
local function put(w, st, ttl, dirty)
  local E = w.E
  if EXPIRE then
    if E.zero(ttl) and not w.hold then
      if dirty and not w.new then redis.call('DEL', w.key) end
      return
    end
    if not dirty then return end
  elseif w.new and E.full(w.p, st) and not w.hold then
    raise(E.cursor(st))
    return
  end
  local vh, vl = w.vh, w.vl
  if not vh then vh, vl = activation(ARGV[w.b + ITEM_AT]) end
  local t, fh, fl, ah, al = E.pack(w.p, st)
  local id = w.id
  if w.hold then id = id .. HOLD_SEP .. w.hold end
  if not EXPIRE then
    redis.call('SET', w.key, writerec(t, fh, fl, ah, al, vh, vl, 0, id))
    return
  end
  local px = renewpx(w.horizon or E.ms(ttl), tonumber(ARGV[ARG_TOLERANCE]), w.exp)
  -- The hash lives as long as the record, and a new reservation's life.
  if w.hold and (px or w.holdms) then HOLDS.live(w, math.max(px or w.exp - nowms(), w.holdms or 0)) end
  if not px then
    redis.call('SET', w.key, writerec(t, fh, fl, ah, al, vh, vl, w.exp, id), 'KEEPTTL')
    return
  end
  redis.call('SET', w.key, writerec(t, fh, fl, ah, al, vh, vl, nowms() + px, id), 'PX', string.format('%d', px))
end

-- A batch's records are read by one MGET for all its calls (batchop):
-- BATCH_RECS, with this call's first at BATCH_BASE + 1, unless an earlier
-- call of the batch touched one of its keys (not BATCH_FRESH): then it
-- reads its own (records).
local BATCH_RECS, BATCH_BASE, BATCH_FRESH

-- decideop and the steps it alone takes (run, answer, records, the
-- request id's, a reserve's, resetr); they are local to the block (the chunk's
-- locals: TestLuaLocals).
local decideop
do
  local function resetr(w)
    if not w.resetr then w.resetr = w.E.untilfull(w.p, w.s) end
    return w.resetr
  end

  -- run decides the request's items (recs are their records as stored):
  -- each bucket's expired reservations returned as it is loaded, its
  -- reports first, in order, each on its bucket's loaded state (what the
  -- rest is decided on, and what is written whatever they say) and settling
  -- the request's reservation, then every other item in order on its
  -- bucket's running state (a check that reserves takes its tokens, unless
  -- the request holds the bucket already). It answers whether all those
  -- were allowed, the buckets in order of first use, each item's result.
  local function run(big, recs)
    local works, order, res, allowed = {}, {}, {}, true
    for i = 1, NITEMS do
      local key, b = KEYS[i], HEADER_ARGS + (i - 1) * ITEM_ARGS
      local w = works[key]
      if not w then
        w = load(b, recs[i], big)
        w.key, w.idx, w.b = key, i, b
        local hz = ARGV[b + ITEM_HORIZON]
        if hz ~= '' then w.horizon = BIG.ms(BN.num(hz)) end
        if recs[i] then
          w.hold = HOLDS.mark(recs[i])
          HOLDS.due(w)
        end
        works[key] = w
        order[#order + 1] = w
      end
      -- The charge follows the on_resize in ITEM_MODE (contract.go).
      if string.sub(ARGV[b + ITEM_MODE], RESIZE_BYTES + 1) == CHARGE_REPORT then
        local cost = ARGV[b + ITEM_COST]
        if w.hold then cost = HOLDS.settle(w, cost) end
        local st, ok, rem, retry, forgiven = w.E.report(w.p, w.s, w.E.cost(cost), cost)
        w.s, w.cur = st, st
        if cost ~= '0' then w.dirty = true end
        res[i] = {w = w, ok = ok, never = false, rem = rem, retry = retry, after = st, forgiven = forgiven}
        w.last = res[i]
      end
    end
    for i = 1, NITEMS do
      if not res[i] then
        local b = HEADER_ARGS + (i - 1) * ITEM_ARGS
        local w, cost = works[KEYS[i]], ARGV[b + ITEM_COST]
        local cur, ok, never, rem, retry
        local charge = string.sub(ARGV[b + ITEM_MODE], RESIZE_BYTES + 1, RESIZE_BYTES + 1)
        if charge == CHARGE_CHECK then
          cur, ok, rem, retry = w.E.check(w.p, w.cur)
          never = false
        elseif charge == CHARGE_RESERVE and (w.reserve or w.hold and HOLDS.find(w)) then
          -- Held already (by this request or an earlier one of its id).
          cur, ok, never, rem, retry = w.E.decide(w.p, w.cur, w.E.cost('0'))
        else
          cur, ok, never, rem, retry = w.E.decide(w.p, w.cur, w.E.cost(cost))
          if ok and cost ~= '0' then w.charged = true end
          if ok and charge == CHARGE_RESERVE then w.reserve = b end
        end
        w.cur = cur
        res[i] = {w = w, ok = ok, never = never, rem = rem, retry = retry, after = cur}
        w.last = res[i]
        allowed = allowed and ok
      end
    end
    return allowed, order, res
  end

  -- answer fills item i's reply fields. A rejected decide answers each
  -- bucket's uncharged balance and, for a plain-number bucket, a snapshot
  -- of it; a reserve answers both outcomes (the charged one first). A
  -- report answers its own, whatever the request's, and its forgiven.
  local function answer(reply, i, r, allowed, reserve)
    local w, E = r.w, r.w.E
    local b = REPLY_HEAD + (i - 1) * REPLY_ITEM_FIELDS
    local flags = 0
    if r.ok then flags = FLAG_ALLOWED end
    if r.never then flags = flags + FLAG_NEVER end
    local rem, reset, x1, x2 = r.rem, nil, 0, 0
    if allowed or reserve or r.forgiven then
      reset = E.untilfull(w.p, r.after)
      if w.last == r then w.reseta = reset end -- the bucket's, once decided
    end
    local remr = rem
    if not r.never then remr = w.s.t end
    if r.forgiven then
      flags, x1 = flags + FLAG_REPORT, r.forgiven
    elseif reserve then
      x1, x2 = E.tokens(w.p, remr), E.out(resetr(w))
    elseif not allowed then
      rem, reset = remr, resetr(w)
      -- A new bucket's cursor depends on FLOOR (without expiry), which
      -- moves: no snapshot of it then.
      -- A bucket with reservations gets none: one may come back before
      -- anything else refills it.
      if E == FAST and (EXPIRE or not w.new) and not w.hold then flags, x1, x2 = flags + FLAG_SNAPSHOT, w.s.f, w.s.a end
    end
    reply[b + REPLY_FLAGS], reply[b + REPLY_REMAINING], reply[b + REPLY_RETRY] = flags, E.tokens(w.p, rem), E.out(r.retry)
    reply[b + REPLY_RESET], reply[b + REPLY_EXTRA1], reply[b + REPLY_EXTRA2] = E.out(reset), x1, x2
  end

  -- records are the call's records (BATCH_RECS above).
  local function records()
    if BATCH_RECS and BATCH_FRESH then
      local recs = {}
      for i = 1, NITEMS do recs[i] = BATCH_RECS[BATCH_BASE + i] end
      return recs
    end
    return redis.call('MGET', unpack(KEYS, 1, NITEMS))
  end

  -- keepid writes the request id's record, kept for ms.
  local function keepid(rec, ms)
    local idk = KEYS[NITEMS + 1]
    redis.call('HSET', idk, ID_FIELD_FP, ARGV[ARG_FP], ID_FIELD_LEFT, ARGV[ARG_MAX_REPLAYS], ID_FIELD_RECORD, rec)
    redis.call('PEXPIRE', idk, ms)
  end

  -- claim looks up the request id: its replay reply, or whether to record
  -- this answer. A reserve claims a new id (ID_PENDING) for its settle.
  local function claim()
    if IDMODE == ID_NONE then return nil, false end
    local idk = KEYS[NITEMS + 1]
    local h = redis.call('HMGET', idk, ID_FIELD_FP, ID_FIELD_LEFT, ID_FIELD_RECORD)
    if h[1] then
      if h[1] == ARGV[ARG_FP] then
        if h[3] == ID_PENDING then return {KIND_PENDING}, false end
        if tonumber(h[2]) > 0 then
          redis.call('HINCRBY', idk, ID_FIELD_LEFT, -1)
          local reply = {}
          reply[REPLY_KIND], reply[REPLY_RECORD] = KIND_REPLAY, h[3]
          return reply, false
        end
      end
      return nil, false
    end
    if OP == OP_RESERVE then keepid(ID_PENDING, ARGV[ARG_PENDING]) end
    return nil, true
  end
  -- settlement writes a reserve's buckets: charged states when allowed, yet
  -- a bucket whose net effect is a refund keeps its uncharged balance until
  -- the settle (never a balance above what either outcome leaves). A
  -- reservation is recorded then, and removed by a rollback. It returns
  -- the settle entries: "index,dir,units,per,new,hold" (hold: a rollback's
  -- reservation's tokens, or empty).
  local function settlement(allowed, order)
    local settle = {}
    for k = 1, #order do
      local w = order[k]
      local st, ttl, dirty = w.s, nil, w.dirty
      if allowed then
        local ur, ua = units(w.p, w.s), units(w.p, w.cur)
        local c, isnew, per, held = BN.cmp(ua, ur), (w.new and '1' or '0'), BN.str(w.p.p), ''
        if w.reserve then held, dirty = HOLDS.add(w), true end
        if c > 0 then
          settle[#settle + 1] = table.concat({w.idx, 'c', BN.str(BN.sub(ua, ur)), per, isnew, ''}, FIELD_SEP)
          if w.reserve then settle[#settle + 1] = table.concat({w.idx, 'u', '0', per, isnew, held}, FIELD_SEP) end
        else
          st, ttl = w.cur, w.reseta
          if c < 0 or w.reserve then
            dirty = true
            settle[#settle + 1] = table.concat({w.idx, 'u', BN.str(BN.sub(ur, ua)), per, isnew, held}, FIELD_SEP)
          end
        end
      end
      if not ttl and EXPIRE then ttl = resetr(w) end
      put(w, st, ttl, dirty)
    end
    return table.concat(settle, CHAIN_SEP)
  end

  -- decideop decides (or, reserve, reserves) the request's items, all or
  -- nothing, and records a new request id's answer.
  function decideop(reserve)
    local replay, keep = claim()
    if replay then return replay end
    local recs = records()
    local allowed, order, res = run(reserve, recs)
    local reply = {}
    reply[REPLY_KIND], reply[REPLY_ALLOWED], reply[REPLY_CLAIMED] = KIND_DECIDED, allowed and 1 or 0, keep and 1 or 0
    for i = 1, NITEMS do answer(reply, i, res[i], allowed, reserve) end
    if reserve then
      reply[REPLY_SETTLE] = settlement(allowed, order)
    else
      reply[REPLY_SETTLE] = ''
      for k = 1, #order do
        local w = order[k]
        if allowed and w.reserve then HOLDS.add(w) end
      end
      for k = 1, #order do
        local w = order[k]
        if allowed then put(w, w.cur, w.reseta, w.dirty or w.charged) else put(w, w.s, resetr(w), w.dirty) end
      end
      if keep then keepid(record(reply, NITEMS), ARGV[ARG_WINDOW]) end
    end
    reply[REPLY_FORGOT] = forgot or ''
    return reply
  end
end

-- settleop adds units (in 1/per of a token) back to buckets, capped at
-- capacity: the rollback of a reservation, or a deferred refund; and
-- writes or releases the request id.
local function settleop()
  local recs = {}
  if NITEMS > 0 then recs = redis.call('MGET', unpack(KEYS, 1, NITEMS)) end
  for i = 1, NITEMS do
    if recs[i] then
      local b = HEADER_ARGS + (i - 1) * SETTLE_ARGS
      local t, fh, fl, ah, al, vh, vl, exp, ident = readrec(recs[i])
      local _, c, n, per = readid(ident)
      local p = bigparams(c, n, per)
      local w = work(BIG, p, nil, ident, vh, vl, exp, false, false)
      w.key, w.hold = KEYS[i], HOLDS.mark(recs[i])
      local s = refill(p, bigstate(p, t, fh, fl, ah, al), nowbig())
      local u, uper = BN.num(ARGV[b + SETTLE_UNITS]), BN.num(ARGV[b + SETTLE_PER])
      if BN.cmp(uper, p.p) ~= 0 then u = BN.divmod(BN.mul(u, p.p), uper) end
      local n = ARGV[b + SETTLE_HOLD]
      if n == '' then
        s = fromunits(p, BN.add(units(p, s), u), s.a)
      else
        local t, more = HOLDS.unhold(w.key, p, units(p, s), u, n)
        s = fromunits(p, t, s.a)
        if not more then w.hold = false end
      end
      if ARGV[b + SETTLE_NEW] == '1' and not EXPIRE and BN.cmp(s.t, p.c) >= 0 and not w.hold then
        redis.call('DEL', w.key)
        raise(BN.str(s.a))
      else
        -- A budget's key keeps the life its decide gave it (its horizon's).
        if BN.iszero(p.n) then w.horizon = math.max(exp - nowms() - 2 * tonumber(ARGV[ARG_TOLERANCE]), 1) end
        put(w, s, untilfull(p, s, nowbig()), true)
      end
    end
  end
  if IDMODE == ID_LAST then
    redis.call('HSET', KEYS[NITEMS + 1], ID_FIELD_RECORD, ARGV[HEADER_ARGS + NITEMS * SETTLE_ARGS + 1])
    redis.call('PEXPIRE', KEYS[NITEMS + 1], ARGV[ARG_WINDOW])
  elseif IDMODE == ID_RELEASE then
    redis.call('DEL', KEYS[NITEMS + 1])
  end
  local reply = {}
  reply[REPLY_KIND], reply[REPLY_ALLOWED], reply[REPLY_FORGOT] = KIND_DECIDED, 0, forgot or ''
  reply[REPLY_SETTLE], reply[REPLY_CLAIMED] = '', 0
  return reply
end

-- one runs one call: it sets the call's state and dispatches.
local function one(keys, args)
  KEYS, ARGV = keys, args
  clock()
  OP, EXPIRE, PID, IDMODE = ARGV[ARG_OP], ARGV[ARG_EXPIRE] == '1', ARGV[ARG_PID], ARGV[ARG_ID_MODE]
  NITEMS, FLOOR, forgot = tonumber(ARGV[ARG_ITEMS]), ARGV[ARG_FLOOR], nil
  if OP == OP_DECIDE then return decideop(false) end
  if OP == OP_RESERVE then return decideop(true) end
  if OP == OP_SETTLE then return settleop() end
  return redis.error_reply('tokengate: unknown operation ' .. tostring(OP))
end

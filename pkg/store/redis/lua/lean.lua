-- lean: the usual decide, on a compact call of a batch (contract.go,
-- compact.go): every item's bucket stored under the item's version (by
-- this process or another) or, with expiry, not stored yet, decided in
-- plain numbers, its keys distinct, no request id. compactcall (batch.lua)
-- takes it when it applies (leandecide), and otherwise lays the call out as
-- alone (classic, codec.lua) for the general path; the two answer and
-- write the same, byte for byte: each step below names the general step
-- it stands for.

-- Per item, leandecide keeps LEAN_FIELDS values in one flat array, LV:
-- params, the loaded state refilled to now (t, f, a), the record's key
-- expiry and version activation (h, l), the record itself (or, for a
-- bucket not stored yet, the identity it is to be stored with), the cost,
-- the state once decided (t, f, a), and whether the bucket is new. LV is
-- kept from call to call, so that it is not grown anew for each.
local LEAN_FIELDS, LV = 13, {}

-- LR holds the values of a lean reply until they are packed; it is kept
-- from call to call too.
local LR = {}

-- A lean write to a bucket that a later call of the batch uses waits in
-- PENDING (by key; their keys in order in PORDER), and is made once, at
-- the end of the batch or before a call takes the general path
-- (flushpending): a bucket every request shares (a global limit) is then
-- read and written once a batch, not once a call. An entry is the record
-- as written (false: deleted) and the PX of a SET (false: a SETRANGE of
-- the balance, which keeps the TTL). LEAN_HOLD: the current call's writes
-- wait (the store marks the calls whose keys a later call uses). Should
-- a held write fail (Redis out of memory), the whole batch fails, and
-- each of its requests is answered by on_store_error, though calls before
-- it may have charged their own buckets: as when Redis fails mid-batch.
-- INREDIS holds the keys whose records only Redis now knows, not the
-- batch's MGET nor PENDING: those a call on the general path touched, and
-- those whose held write was made.
local PENDING, PORDER, INREDIS, LEAN_HOLD = {}, {}, {}, false

local function pend(key, rec, px)
  local p = PENDING[key]
  if p then
    p.rec, p.px = rec, px
    return
  end
  PORDER[#PORDER + 1] = key
  PENDING[key] = {rec = rec, px = px}
end

-- write makes a lean write: a delete (rec false), a SET of the record rec
-- with PX px, or else a SETRANGE of the balance bal.
local function write(key, rec, px, bal)
  if not rec then
    redis.call('DEL', key)
  elseif px then
    redis.call('SET', key, rec, 'PX', string.format('%d', px))
  else
    redis.call('SETRANGE', key, '0', bal)
  end
end

local function flushpending()
  for i = 1, #PORDER do
    local key = PORDER[i]
    local p = PENDING[key]
    -- A SETRANGE writes the record's balance only.
    write(key, p.rec, p.px, p.rec and not p.px and string.sub(p.rec, 1, REC_BALANCE_BYTES))
    PENDING[key], PORDER[i], INREDIS[key] = nil, nil, true
  end
end

-- batchrecs are the records of a call's n keys (at ko + 1) as the batch
-- has left them: a pending write's, else the batch's MGET's, unless only
-- Redis knows it now (INREDIS).
local function batchrecs(keys, ko, n)
  local recs, read = {}, false
  for i = 1, n do
    local key = keys[ko + i]
    local p = PENDING[key]
    if p then
      recs[i] = p.rec
    elseif INREDIS[key] then
      read = true
    else
      recs[i] = BATCH_RECS[ko + i]
    end
  end
  if read then
    local m = redis.call('MGET', unpack(keys, ko + 1, ko + n))
    for i = 1, n do
      local key = keys[ko + i]
      if not PENDING[key] and INREDIS[key] then recs[i] = m[i] end
    end
  end
  return recs
end

-- leandecide decides (or, reserve, reserves) a call's n items, packed in
-- s from pos, their keys at ko + 1 and their records at base + 1 in recs
-- (run, answer and put of decideop), or reports (nil) that the lean path
-- does not apply. Its reply is packed (contract.go). Keys are distinct, so
-- a report (charged whatever the request's gates say) is alone on its
-- bucket: what it leaves is written either way. A reserve writes what a
-- decide writes and answers as decideop's does: each item's own outcome,
-- and but for a report its bucket's uncharged tokens and reset in its
-- extra fields, and no snapshot; its costs are never refunds, so that what
-- it charged is each allowed item's cost, which the store adds back should
-- the request be refused (cross.go).
--
-- It runs once an item: it keeps the C functions it calls most as
-- upvalues (sfind, sunpack, spack, rcall: redis.call), each read at once
-- where a library's function is two lookups (the global, then its field).
local leandecide
do
  local sfind, sunpack, spack, rcall = string.find, struct.unpack, struct.pack, redis.call

  -- leanpeer reports whether a bucket's record rec, whose identity is not
  -- the item's, still needs no conversion to the item's version, of
  -- version string ver (load): its identity is another process's at the
  -- same revision and parameters. It is compared in place, without
  -- cutting it out of the record. A bucket with reservations (its record
  -- marked: holds.lua) is left to the general path.
  local function leanpeer(rec, ver)
    local at = REC_BYTES + 1
    return sfind(rec, ver, at, true) == at and sfind(rec, PID, at + #ver, true) ~= at + #ver and
      not sfind(rec, HOLD_SEP, at + #ver, true)
  end

  function leandecide(keys, ko, recs, base, n, s, pos, tol, reserve)
    local reply, allowed, v = LR, true, LV
    reply[1] = 0
    for i = 1, n do
      local vi, cost
      vi, cost, pos = sunpack(CALL_ITEM_FORMAT, s, pos)
      local rec, p = recs[base + i], BFAST[vi]
      if not p then return nil end
      local vo, k = VBASE + (vi - 1) * ITEM_ARGS, (i - 1) * LEAN_FIELDS
      local t, f, a
      if not rec then
        -- Not stored yet: full, its cursor at now (newbucket: with expiry
        -- there is no floor), to be stored under the item's version.
        if not EXPIRE then return nil end
        t, f, a = p.c, 0, 0
        v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5] = p, t, f, a, false
        v[k + 6], v[k + 7], v[k + 8], v[k + 9], v[k + 13] = BACT[2 * vi - 1], BACT[2 * vi], BARGS[vo + ITEM_ID], cost, true
      else
        -- A record needs no conversion to the item's version (load) when
        -- its identity is the item's (the usual case, tested here, in
        -- place, without a call) or leanpeer says so.
        local id, at = BARGS[vo + ITEM_ID], REC_BYTES + 1
        if (#rec ~= REC_BYTES + #id or sfind(rec, id, at, true) ~= at) and not leanpeer(rec, BARGS[vo + ITEM_VERSION]) then
          return nil
        end
        local rt, fh, fl, ah, al, vh, vl, exp = sunpack(REC_FORMAT, rec)
        local ra = fastrel(ah, al)
        if not ra then return nil end
        t, f, a = frefill(p, rt, fh * 1e9 + fl, ra)
        v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5] = p, t, f, a, exp
        v[k + 6], v[k + 7], v[k + 8], v[k + 9], v[k + 13] = vh, vl, rec, cost, false
      end
      -- The item decided on its loaded state, refilled to now.
      local r, ok, never, rem, retry = 1 + (i - 1) * REPLY_ITEM_FIELDS, false, false
      local flags, kind = 0, p.k
      if kind == CHARGE_REPORT then
        t, f, a, ok, rem, retry, reply[r + REPLY_EXTRA1] = freport(p, t, f, a, cost)
        flags = FLAG_REPORT
      elseif kind == CHARGE_CHECK then
        t, f, a, ok, rem, retry = fcheck(p, t, f, a)
        allowed = allowed and ok
      elseif cost > 0 and cost <= p.c and t >= cost then
        -- The usual charge, allowed: fdecide's answer, without the call.
        t = t - cost
        ok, rem, retry = true, t, 0
      else
        t, f, a, ok, never, rem, retry = fdecide(p, t, f, a, cost)
        allowed = allowed and ok
      end
      v[k + 10], v[k + 11], v[k + 12] = t, f, a
      if ok then flags = flags + FLAG_ALLOWED end
      if never then flags = flags + FLAG_NEVER end
      reply[r + REPLY_FLAGS], reply[r + REPLY_REMAINING], reply[r + REPLY_RETRY] = flags, rem, retry
    end
    local keep = EXPIRE and nowms() + 1 + tol
    for i = 1, n do
      local k, r = (i - 1) * LEAN_FIELDS, 1 + (i - 1) * REPLY_ITEM_FIELDS
      local p, key = v[k + 1], keys[ko + i]
      local report = p.k == CHARGE_REPORT
      -- The state to write, ns until it is full (funtil to p.c:
      -- funtilfull's wait, one call less), and whether it is written.
      local t, f, a, put, ns
      if allowed or report then
        t, f, a = v[k + 10], v[k + 11], v[k + 12]
        -- A check (cost 0) leaves the stored bucket as it was, but for the
        -- refill that the record's cursor gives anyway.
        put = not EXPIRE or v[k + 9] ~= 0
        ns = funtil(p, t, f, a, p.c)
        reply[r + REPLY_RESET], reply[r + REPLY_EXTRA2] = ns, 0
        if reserve and not report then
          reply[r + REPLY_EXTRA1], reply[r + REPLY_EXTRA2] = v[k + 2], funtilfull(p, v[k + 2], v[k + 3], v[k + 4])
        elseif not report then
          reply[r + REPLY_EXTRA1] = 0
        end
      else
        t, f, a = v[k + 2], v[k + 3], v[k + 4]
        put = not EXPIRE
        ns = funtil(p, t, f, a, p.c)
        if reserve then
          -- Each item's own outcome, and the bucket's uncharged one.
          reply[r + REPLY_RESET] = funtilfull(p, v[k + 10], v[k + 11], v[k + 12])
          reply[r + REPLY_EXTRA1], reply[r + REPLY_EXTRA2] = t, ns
        else
          reply[r + REPLY_FLAGS] = reply[r + REPLY_FLAGS] + FLAG_SNAPSHOT
          reply[r + REPLY_REMAINING], reply[r + REPLY_RESET] = t, ns
          reply[r + REPLY_EXTRA1], reply[r + REPLY_EXTRA2] = f, a
        end
      end
      if put then
        -- The write (put), or held back (PENDING). Only the balance
        -- changes: the rest of the record (version, activation, expiry,
        -- identity) is already stored, so the write is a SETRANGE of the
        -- balance, which keeps the TTL, unless the TTL must grow (by tol
        -- ms, the tolerance) or the bucket is new: then a SET of the whole
        -- record with its TTL. A full bucket is deleted (a new one, never
        -- stored, is left so). The record's numbers are fpack's, its usual
        -- case (a whole fraction below 1e9, the cursor at now) without the
        -- call.
        local fh, fl, ah, al = 0, f, NH, NL
        if f >= 1e9 or a ~= 0 then t, fh, fl, ah, al = fpack(t, f, a) end
        local hold, exp = LEAN_HOLD or PENDING[key], v[k + 5]
        if EXPIRE and ns == 0 then
          if not v[k + 13] then
            if hold then pend(key, false, false) else write(key, false) end
          end
        elseif EXPIRE and (not exp or ns > (exp - keep) * 1e6) then
          -- renewpx's rule, ceil(ns / 1e6) <= exp - keep, compared in ns
          -- without dividing: exact, as ns < FAST_LIMIT and a product of
          -- 2^53 or more rounds to no less.
          local px = fms(ns) + 2 * tol
          local ident = v[k + 8]
          if not v[k + 13] then ident = string.sub(ident, REC_BYTES + 1) end
          local rec = writerec(t, fh, fl, ah, al, v[k + 6], v[k + 7], nowms() + px, ident)
          if hold then pend(key, rec, px) else write(key, rec, px) end
        else
          local bal = spack(REC_BALANCE_FORMAT, t, fh, fl, ah, al)
          if hold then
            local q = PENDING[key]
            pend(key, bal .. string.sub(v[k + 8], REC_BALANCE_BYTES + 1), q and q.px)
          else
            rcall('SETRANGE', key, '0', bal)
          end
        end
      end
    end
    if allowed then reply[1] = 1 end
    return packreply(reply, n)
  end
end

-- lean: the usual decide, on a compact call of a batch (contract.go,
-- compact.go): every item's bucket stored under the item's version (by
-- this process or another) or, with expiry, not stored yet, decided in
-- plain numbers, its keys distinct, no request id. compactcall (batch.lua)
-- takes it when it applies (leanload), and otherwise lays the call out as
-- alone (classic, codec.lua) for the general path; the two answer and
-- write the same, byte for byte: each step below names the general step
-- it stands for.

-- Per item, leanload keeps LEAN_FIELDS values in one flat array, LV:
-- params, the loaded state refilled to now (t, f, a), the record's key
-- expiry and version activation (h, l), the record itself (or, for a
-- bucket not stored yet, the identity it is to be stored with), the cost,
-- the state once decided (t, f, a), and whether the bucket is new. LV is
-- kept from call to call, so that it is not grown anew for each.
local LEAN_FIELDS, LV = 13, {}

-- LR holds the values of a lean reply until they are packed; it is kept
-- from call to call too.
local LR = {}

-- leanpeer and leanload run once an item: they keep the C functions
-- they call most as upvalues (sfind, sunpack), each read at once where
-- a library's function is two lookups (the global, then its field).
local leanpeer, leanload
do
  local sfind, sunpack = string.find, struct.unpack

  -- leanpeer reports whether a bucket's record rec, whose identity is not
  -- the item's, still needs no conversion to the item's version, of
  -- version string ver (load): its identity is another process's at the
  -- same revision and parameters. It is compared in place, without
  -- cutting it out of the record. A bucket with reservations (its record
  -- marked: holds.lua) is left to the general path.
  function leanpeer(rec, ver)
    local at = REC_BYTES + 1
    return sfind(rec, ver, at, true) == at and sfind(rec, PID, at + #ver, true) ~= at + #ver and
      not sfind(rec, HOLD_SEP, at + #ver, true)
  end

  -- leanload reads a call's n items (packed in s from pos, their
  -- records at base + 1 in recs) into LV, or reports that the lean path
  -- does not apply.
  function leanload(recs, base, n, s, pos)
    local v = LV
    for i = 1, n do
      local vi, cost
      vi, cost, pos = sunpack(CALL_ITEM_FORMAT, s, pos)
      local rec, p = recs[base + i], BFAST[vi]
      if not p then return false end
      local vo, k = VBASE + (vi - 1) * ITEM_ARGS, (i - 1) * LEAN_FIELDS
      if not rec then
        -- Not stored yet: full, its cursor at now (newbucket: with expiry
        -- there is no floor), to be stored under the item's version.
        if not EXPIRE then return false end
        v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5] = p, p.c, 0, 0, false
        v[k + 6], v[k + 7], v[k + 8], v[k + 9], v[k + 13] = BACT[2 * vi - 1], BACT[2 * vi], BARGS[vo + ITEM_ID], cost, true
      else
        -- A record needs no conversion to the item's version (load) when
        -- its identity is the item's (the usual case, tested here, in
        -- place, without a call) or leanpeer says so.
        local id, at = BARGS[vo + ITEM_ID], REC_BYTES + 1
        if (#rec ~= REC_BYTES + #id or sfind(rec, id, at, true) ~= at) and not leanpeer(rec, BARGS[vo + ITEM_VERSION]) then
          return false
        end
        local t, fh, fl, ah, al, vh, vl, exp = sunpack(REC_FORMAT, rec)
        local a = fastrel(ah, al)
        if not a then return false end
        local rt, rf, ra = frefill(p, t, fh * 1e9 + fl, a)
        v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5] = p, rt, rf, ra, exp
        v[k + 6], v[k + 7], v[k + 8], v[k + 9], v[k + 13] = vh, vl, rec, cost, false
      end
    end
    return true
  end
end

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

local leanwrite
do
  -- struct.pack as an upvalue, as in leanload.
  local spack = struct.pack

  -- leanwrite writes item k's (its offset in LV) balance t, f, a, full in
  -- ns (put), or holds the write back (PENDING). Only the balance changes:
  -- the rest of the record (version, activation, expiry, identity) is
  -- already stored, so the write is a SETRANGE of the balance, which keeps
  -- the TTL, unless the TTL must grow (by tol ms, the tolerance) or the
  -- bucket is new: then a SET of the whole record with its TTL. A full
  -- bucket is deleted (a new one, never stored, is left so). keep is
  -- nowms() + 1 + tol (leandecide's, once a call).
  function leanwrite(key, t, f, a, ns, k, tol, keep)
    local v, fh, fl, ah, al = LV
    t, fh, fl, ah, al = fpack(t, f, a)
    local hold = LEAN_HOLD or PENDING[key]
    if EXPIRE then
      if ns == 0 then
        if v[k + 13] then return end
        if hold then pend(key, false, false) else write(key, false) end
        return
      end
      -- renewpx's rule, ceil(ns / 1e6) <= exp - keep, compared in ns
      -- without dividing: exact, as ns < FAST_LIMIT and a product of 2^53
      -- or more rounds to no less.
      local exp = v[k + 5]
      if not exp or ns > (exp - keep) * 1e6 then
        local px = fms(ns) + 2 * tol
        local ident = v[k + 8]
        if not v[k + 13] then ident = string.sub(ident, REC_BYTES + 1) end
        local rec = writerec(t, fh, fl, ah, al, v[k + 6], v[k + 7], nowms() + px, ident)
        if hold then pend(key, rec, px) else write(key, rec, px) end
        return
      end
    end
    local bal = spack(REC_BALANCE_FORMAT, t, fh, fl, ah, al)
    if hold then
      local p = PENDING[key]
      pend(key, bal .. string.sub(v[k + 8], REC_BALANCE_BYTES + 1), p and p.px)
    else
      redis.call('SETRANGE', key, '0', bal)
    end
  end
end

-- leandecide decides (or, reserve, reserves) the n loaded items (run,
-- answer and put of decideop); their keys are at ko + 1. Its reply is
-- packed (contract.go). Keys are distinct, so a report (charged whatever
-- the request's gates say) is alone on its bucket: what it leaves is
-- written either way. A reserve writes what a decide writes and answers
-- as decideop's does: each item's own outcome, and but for a report its
-- bucket's uncharged tokens and reset in its extra fields, and no
-- snapshot; its costs are never refunds, so that what it charged is each
-- allowed item's cost, which the store adds back should the request be
-- refused (cross.go).
local function leandecide(keys, ko, n, tol, reserve)
  local reply, allowed, v, keep = LR, true, LV, EXPIRE and nowms() + 1 + tol
  reply[1] = 0
  for i = 1, n do
    local k = (i - 1) * LEAN_FIELDS
    local p, cost = v[k + 1], v[k + 9]
    local t, f, a, ok, never, rem, retry = v[k + 2], v[k + 3], v[k + 4], false, false
    local r = 1 + (i - 1) * REPLY_ITEM_FIELDS
    local flags = 0
    if p.k == CHARGE_REPORT then
      t, f, a, ok, rem, retry, reply[r + REPLY_EXTRA1] = freport(p, t, f, a, cost)
      flags = FLAG_REPORT
    elseif p.k == CHARGE_CHECK then
      t, f, a, ok, rem, retry = fcheck(p, t, f, a)
      allowed = allowed and ok
    else
      t, f, a, ok, never, rem, retry = fdecide(p, t, f, a, cost)
      allowed = allowed and ok
    end
    v[k + 10], v[k + 11], v[k + 12] = t, f, a
    if ok then flags = flags + FLAG_ALLOWED end
    if never then flags = flags + FLAG_NEVER end
    reply[r + REPLY_FLAGS], reply[r + REPLY_REMAINING], reply[r + REPLY_RETRY] = flags, rem, retry
  end
  for i = 1, n do
    local k, r = (i - 1) * LEAN_FIELDS, 1 + (i - 1) * REPLY_ITEM_FIELDS
    local p, key = v[k + 1], keys[ko + i]
    local report = p.k == CHARGE_REPORT
    if allowed or report then
      local t, f, a = v[k + 10], v[k + 11], v[k + 12]
      -- funtil to p.c: funtilfull's wait, one call less.
      local reset = funtil(p, t, f, a, p.c)
      reply[r + REPLY_RESET], reply[r + REPLY_EXTRA2] = reset, 0
      if reserve and not report then
        reply[r + REPLY_EXTRA1], reply[r + REPLY_EXTRA2] = v[k + 2], funtilfull(p, v[k + 2], v[k + 3], v[k + 4])
      elseif not report then
        reply[r + REPLY_EXTRA1] = 0
      end
      -- A check (cost 0) leaves the stored bucket as it was, but for the
      -- refill that the record's cursor gives anyway.
      if not EXPIRE or v[k + 9] ~= 0 then leanwrite(key, t, f, a, reset, k, tol, keep) end
    else
      local t, f, a = v[k + 2], v[k + 3], v[k + 4]
      local reset = funtil(p, t, f, a, p.c)
      if reserve then
        -- Each item's own outcome, and the bucket's uncharged one.
        reply[r + REPLY_RESET] = funtilfull(p, v[k + 10], v[k + 11], v[k + 12])
        reply[r + REPLY_EXTRA1], reply[r + REPLY_EXTRA2] = t, reset
      else
        reply[r + REPLY_FLAGS] = reply[r + REPLY_FLAGS] + FLAG_SNAPSHOT
        reply[r + REPLY_REMAINING], reply[r + REPLY_RESET] = t, reset
        reply[r + REPLY_EXTRA1], reply[r + REPLY_EXTRA2] = f, a
      end
      if not EXPIRE then leanwrite(key, t, f, a, reset, k, tol, keep) end
    end
  end
  if allowed then reply[1] = 1 end
  return packreply(reply, n)
end

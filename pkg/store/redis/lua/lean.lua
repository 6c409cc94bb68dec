-- lean: the usual decide, with no per-bucket work tables: every item's
-- bucket stored under the item's version (by this process or another), decided in plain numbers,
-- its key not repeated in the request, and no request id. decideop takes
-- it when it applies (leanload), the general path (run, answer, put)
-- otherwise; the two answer and write the same, byte for byte: each step
-- below names the general step it stands for.

-- Per item, leanload keeps LEAN_FIELDS values in one flat array: params,
-- loaded state (refilled to now), the record's key expiry and version
-- activation (h, l), and the record itself.
local LEAN_FIELDS = 6

-- leansame reports whether a bucket's record rec needs no conversion to
-- item b's version (load): its identity is the item's, or another
-- process's at the same revision and parameters. The identity is compared
-- in place, without cutting it out of the record.
local function leansame(rec, b)
  local at, id = REC_BYTES + 1, ARGV[b + ITEM_ID]
  if #rec == REC_BYTES + #id and string.find(rec, id, at, true) == at then return true end
  local ver = ARGV[b + ITEM_VERSION]
  return string.find(rec, ver, at, true) == at and string.find(rec, PID, at + #ver, true) ~= at + #ver
end

-- leanload reads the request's records into v, or reports that the lean
-- path does not apply.
local function leanload(recs, v)
  if IDMODE ~= ID_NONE or OP ~= OP_DECIDE then return false end
  for i = 1, NITEMS do
    local rec, b = recs[i], HEADER_ARGS + (i - 1) * ITEM_ARGS
    local fp = ARGV[b + ITEM_FAST]
    if not rec or fp == '' or not leansame(rec, b) then return false end
    for j = 1, i - 1 do
      if KEYS[j] == KEYS[i] then return false end
    end
    local t, fh, fl, ah, al, vh, vl, exp = struct.unpack(REC_FORMAT, rec)
    local a = fastrel(ah, al)
    if not a then return false end
    local c, n, per = struct.unpack(FAST_FORMAT, fp)
    local p = {c = c, n = n, p = per}
    local k = (i - 1) * LEAN_FIELDS
    v[k + 1], v[k + 2], v[k + 3], v[k + 4], v[k + 5], v[k + 6] = p, frefill(p, {t = t, f = fh * 1e9 + fl, a = a}), exp, vh, vl, rec
  end
  return true
end

-- leanwrite writes item i's balance st, full in ns (put). Only the
-- balance changes: the rest of the record (version, activation, expiry,
-- identity) is already stored, so the write is a SETRANGE of the balance,
-- which keeps the TTL, unless the TTL must grow (by tol ms, the
-- tolerance).
local function leanwrite(i, st, ns, v, tol)
  local k = (i - 1) * LEAN_FIELDS
  local t, fh, fl, ah, al = fpack(st)
  if EXPIRE then
    if ns == 0 then
      redis.call('DEL', KEYS[i])
      return
    end
    local px = renewpx(fms(ns), tol, v[k + 3])
    if px then
      local ident = string.sub(v[k + 6], REC_BYTES + 1)
      redis.call('SET', KEYS[i], writerec(t, fh, fl, ah, al, v[k + 4], v[k + 5], nowms() + px, ident), 'PX', px)
      return
    end
  end
  redis.call('SETRANGE', KEYS[i], 0, struct.pack(REC_BALANCE_FORMAT, t, fh, fl, ah, al))
end

-- leandecide decides the loaded items (run, answer and put of decideop).
local function leandecide(v)
  local reply, allowed = {}, true
  local after = {}
  for i = 1, NITEMS do
    local k, b = (i - 1) * LEAN_FIELDS, HEADER_ARGS + (i - 1) * ITEM_ARGS
    local p, s = v[k + 1], v[k + 2]
    local cur, ok, never, rem, retry = fdecide(p, s, tonumber(ARGV[b + ITEM_COST]))
    after[i] = cur
    allowed = allowed and ok
    local f = REPLY_HEAD + (i - 1) * REPLY_ITEM_FIELDS
    local flags = 0
    if ok then flags = FLAG_ALLOWED end
    if never then flags = flags + FLAG_NEVER end
    reply[f + REPLY_FLAGS], reply[f + REPLY_REMAINING], reply[f + REPLY_RETRY] = flags, rem, retry
  end
  local tol = tonumber(ARGV[ARG_TOLERANCE])
  for i = 1, NITEMS do
    local k, b = (i - 1) * LEAN_FIELDS, HEADER_ARGS + (i - 1) * ITEM_ARGS
    local p, s = v[k + 1], v[k + 2]
    local f = REPLY_HEAD + (i - 1) * REPLY_ITEM_FIELDS
    if allowed then
      local reset = funtilfull(p, after[i])
      reply[f + REPLY_RESET], reply[f + REPLY_EXTRA1], reply[f + REPLY_EXTRA2] = reset, 0, 0
      -- A check (cost 0) leaves the stored bucket as it was, but for the
      -- refill that the record's cursor gives anyway.
      if not EXPIRE or ARGV[b + ITEM_COST] ~= '0' then leanwrite(i, after[i], reset, v, tol) end
    else
      local reset = funtilfull(p, s)
      reply[f + REPLY_FLAGS] = reply[f + REPLY_FLAGS] + FLAG_SNAPSHOT
      reply[f + REPLY_REMAINING], reply[f + REPLY_RESET] = s.t, reset
      reply[f + REPLY_EXTRA1], reply[f + REPLY_EXTRA2] = s.f, s.a
      if not EXPIRE then leanwrite(i, s, reset, v, tol) end
    end
  end
  reply[REPLY_KIND], reply[REPLY_ALLOWED], reply[REPLY_CLAIMED] = KIND_DECIDED, allowed and 1 or 0, 0
  reply[REPLY_SETTLE], reply[REPLY_FORGOT] = '', ''
  return reply
end

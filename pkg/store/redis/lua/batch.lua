-- batch: a batch's calls (contract.go), each run as if alone; a compact
-- call takes the lean path (lean.lua) when it applies, else is laid out
-- as alone (classic, codec.lua) for the general one. And main, the one
-- entry point.

-- general runs a call on the general path: the batch's held writes are
-- made first, and its keys are then known to Redis only (INREDIS). It
-- marks them also when the call fails.
local function general(f, keys, args)
  flushpending()
  local ok, r = pcall(f, keys, args)
  for i = 1, #keys do INREDIS[keys[i]] = true end
  if not ok then error(r, 0) end
  return r
end

-- compactcall runs the compact call s, whose keys are at ko + 1 in the
-- batch's: a decide or, with CALL_RESERVE, a reserve.
local function compactcall(keys, ko, s)
  local ci, nh, nl, fh, fl, n, distinct, pos = struct.unpack(CALL_FORMAT, s)
  local co = BATCH_HEAD + (ci - 1) * HEADER_ARGS
  local reserve = distinct >= CALL_RESERVE
  if reserve then distinct = distinct - CALL_RESERVE end
  NH, NL, NOWBIG, NOWMS = nh, nl, nil, nil
  EXPIRE, PID = BARGS[co + ARG_EXPIRE] == '1', BARGS[co + ARG_PID]
  if distinct == 1 then
    -- A call with a key an earlier call of the batch touched reads it as
    -- the batch left it.
    local recs, base = BATCH_RECS, ko
    if not BATCH_FRESH then recs, base = batchrecs(keys, ko, n), 0 end
    local r = leandecide(keys, ko, recs, base, n, s, pos, BTOL[ci], reserve)
    if r then return r end
  end
  return general(one, {unpack(keys, ko + 1, ko + n)}, classic(co, nh, nl, fh, fl, n, s, pos, reserve))
end

-- batchop runs a batch's calls one after another, each as if alone and
-- under pcall, so that one call's error fails only that call, and answers
-- their replies in order. One MGET reads every call's records, or one per
-- run of a node call's keys of one slot (runs, their lengths); the lean
-- writes held back (PENDING) are made at the end.
local function batchop(keys, args, runs)
  local m, nc, nv = tonumber(args[ARG_BATCH_CALLS]), tonumber(args[ARG_BATCH_CONTEXTS]), tonumber(args[ARG_BATCH_VERSIONS])
  readbatch(args, nc, nv)
  local counts, cpos = args[VBASE + nv * ITEM_ARGS + 1], 1
  local out, ko, ao = {}, 0, VBASE + nv * ITEM_ARGS + 1
  if runs then
    local o = 0
    BATCH_RECS = {}
    for i = 1, #runs do
      local n = tonumber(runs[i])
      local m = redis.call('MGET', unpack(keys, o + 1, o + n))
      for j = 1, n do BATCH_RECS[o + j] = m[j] end
      o = o + n
    end
  else
    BATCH_RECS = redis.call('MGET', unpack(keys))
  end
  PENDING, PORDER, INREDIS = {}, {}, {}
  for j = 1, m do
    local nk, na
    nk, na, cpos = struct.unpack(CALL_COUNTS_FORMAT, counts, cpos)
    BATCH_BASE, BATCH_FRESH, LEAN_HOLD = ko, nk > 0, na < 0
    if nk < 0 then nk = -nk end
    if na < 0 then na = -na end
    local ok, r
    if na == 1 then
      ok, r = pcall(compactcall, keys, ko, args[ao + 1])
    else
      ok, r = pcall(general, one, {unpack(keys, ko + 1, ko + nk)}, {unpack(args, ao + 1, ao + na)})
    end
    if not ok and not (type(r) == 'table' and r.err) then r = redis.error_reply(tostring(r)) end
    out[j] = r
    ko, ao = ko + nk, ao + na
  end
  flushpending()
  return out
end

-- main is the one entry point: a batch, or one call; a node call is a
-- batch with its keys among its arguments.
local function main(keys, args)
  BATCH_RECS = nil
  if args[ARG_OP] == OP_NODE then
    local r, n = tonumber(args[NODE_HEAD]), 0
    local runs = {unpack(args, NODE_HEAD + 1, NODE_HEAD + r)}
    for i = 1, r do n = n + tonumber(runs[i]) end
    keys = {unpack(args, NODE_HEAD + r + 1, NODE_HEAD + r + n)}
    return batchop(keys, {unpack(args, NODE_HEAD + r + n + 1)}, runs)
  end
  if args[ARG_OP] == OP_BATCH then return batchop(keys, args) end
  return one(keys, args)
end

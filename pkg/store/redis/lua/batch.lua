-- batch: a batch's calls (contract.go), each run as if alone; a compact
-- call takes the lean path (lean.lua) when it applies, else is laid out
-- as alone (classic) for the general one. And main, the one entry point.

-- atoffset is now (h, l) less act, a signed decimal instant, as a signed
-- decimal: an item's ITEM_AT.
local function atoffset(nh, nl, act)
  local neg = string.sub(act, 1, 1) == '-'
  if neg then act = string.sub(act, 2) end
  local ah, al = split(act)
  if neg then
    local h, l = nh + ah, nl + al
    if l >= 1e9 then h, l = h + 1, l - 1e9 end
    return hldec(h, l)
  end
  local sign = ''
  if ah > nh or (ah == nh and al > nl) then sign, nh, nl, ah, al = '-', ah, al, nh, nl end
  local h, l = nh - ah, nl - al
  if l < 0 then h, l = h - 1, l + 1e9 end
  return sign .. hldec(h, l)
end

-- classic lays a compact call out as alone: its context's header and its
-- versions' blocks, with its own instant, floor, items, costs and
-- activations set (s from pos holds its items).
local function classic(co, nh, nl, fh, fl, n, s, pos)
  local a = {unpack(BARGS, co + 1, co + HEADER_ARGS)}
  a[ARG_NOW], a[ARG_ITEMS], a[ARG_FLOOR] = hldec(nh, nl), string.format('%d', n), ''
  if fh >= 0 then a[ARG_FLOOR] = hldec(fh, fl) end
  for i = 1, n do
    local vi, cost
    vi, cost, pos = struct.unpack(CALL_ITEM_FORMAT, s, pos)
    local vo, b = VBASE + (vi - 1) * ITEM_ARGS, HEADER_ARGS + (i - 1) * ITEM_ARGS
    for f = 1, ITEM_ARGS do a[b + f] = BARGS[vo + f] end
    a[b + ITEM_COST], a[b + ITEM_AT] = string.format('%.0f', cost), atoffset(nh, nl, BARGS[vo + ITEM_AT])
  end
  return a
end

-- compactcall runs the compact call s, whose keys are at ko + 1 in the
-- batch's.
local function compactcall(keys, ko, s)
  local ci, nh, nl, fh, fl, n, distinct, pos = struct.unpack(CALL_FORMAT, s)
  local co = BATCH_HEAD + (ci - 1) * HEADER_ARGS
  NH, NL, NOWBIG, NOWMS = nh, nl, nil, nil
  EXPIRE, PID = BARGS[co + ARG_EXPIRE] == '1', BARGS[co + ARG_PID]
  if distinct == 1 and BATCH_FRESH and leanload(ko, n, s, pos) then
    return leandecide(keys, ko, n, BTOL[ci])
  end
  return one({unpack(keys, ko + 1, ko + n)}, classic(co, nh, nl, fh, fl, n, s, pos))
end

-- batchop runs a batch's calls one after another, each as if alone and
-- under pcall, so that one call's error fails only that call, and answers
-- their replies in order. One MGET reads every call's records.
local function batchop(keys, args)
  local m, nc, nv = tonumber(args[ARG_BATCH_CALLS]), tonumber(args[ARG_BATCH_CONTEXTS]), tonumber(args[ARG_BATCH_VERSIONS])
  BARGS, VBASE, BFAST, BACT, BTOL = args, BATCH_HEAD + nc * HEADER_ARGS, {}, {}, {}
  for i = 1, nc do BTOL[i] = tonumber(args[BATCH_HEAD + (i - 1) * HEADER_ARGS + ARG_TOLERANCE]) end
  for i = 1, nv do
    local vo = VBASE + (i - 1) * ITEM_ARGS
    local fp, act = args[vo + ITEM_FAST], args[vo + ITEM_AT]
    -- The activation, floored at 0 (activation, in codec.lua).
    BACT[2 * i - 1], BACT[2 * i] = 0, 0
    if string.sub(act, 1, 1) ~= '-' then BACT[2 * i - 1], BACT[2 * i] = split(act) end
    BFAST[i] = false
    if fp ~= '' then
      local c, n, per = struct.unpack(FAST_FORMAT, fp)
      BFAST[i] = {c = c, n = n, p = per}
    end
  end
  local counts = VBASE + nv * ITEM_ARGS
  local out, ko, ao = {}, 0, counts + 2 * m
  BATCH_RECS = redis.call('MGET', unpack(keys))
  for j = 1, m do
    local nk, na = tonumber(args[counts + 2 * j - 1]), tonumber(args[counts + 2 * j])
    BATCH_BASE, BATCH_FRESH = ko, nk > 0
    if nk < 0 then nk = -nk end
    local ok, r
    if na == 1 then
      ok, r = pcall(compactcall, keys, ko, args[ao + 1])
    else
      ok, r = pcall(one, {unpack(keys, ko + 1, ko + nk)}, {unpack(args, ao + 1, ao + na)})
    end
    if not ok and not (type(r) == 'table' and r.err) then r = redis.error_reply(tostring(r)) end
    out[j] = r
    ko, ao = ko + nk, ao + na
  end
  return out
end

-- main is the one entry point: a batch, or one call.
local function main(keys, args)
  BATCH_RECS = nil
  if args[ARG_OP] == OP_BATCH then return batchop(keys, args) end
  return one(keys, args)
end

-- codec: the script's side of the Go<->Lua contract (contract.go defines
-- every position, separator and constant; they are the locals generated
-- above): the clock, instants, the arguments, the bucket record, the
-- version string and chain, the reply and the replay record, a batch's
-- tables, a compact call laid out as alone, and the packed reply.
--
-- Everything here and above is defined once, when Redis loads the
-- library; a call sets the per-call state (KEYS, ARGV, the clock) first.
local KEYS, ARGV
-- The call's header (see one, in ops) and the latest cursor of a full new
-- bucket it did not store (decimal).
local OP, EXPIRE, PID, IDMODE, NITEMS, FLOOR, forgot

-- split reads a decimal instant as h*10^9 + l, both exact numbers.
local function split(s)
  local n = #s
  if n <= 9 then return 0, tonumber(s) end
  return tonumber(string.sub(s, 1, n - 9)), tonumber(string.sub(s, n - 8))
end

-- The call's instant: now = NH*10^9 + NL ns, the request's biased
-- instant on the replicas' shared clock (the script reads no clock of its
-- own: see clock.go); its bignum once needed.
local NH, NL, NOWBIG, NOWMS
local function clock()
  NOWBIG, NOWMS = nil, nil
  NH, NL = split(ARGV[ARG_NOW])
end

-- An instant, or any value up to 2^63, is a pair h*10^9 + l of exact
-- numbers in records and in the plain-number path.
local function hldec(h, l)
  if h == 0 then return string.format('%.0f', l) end
  return string.format('%.0f%09.0f', h, l)
end
local function hlbig(h, l) return BN.num(hldec(h, l)) end
local bighl
do
  local BILLION = BN.num('1000000000')
  function bighl(a)
    local q, r = BN.divmod(a, BILLION)
    return BN.tonum(q), BN.tonum(r)
  end
end
local function nowbig()
  if not NOWBIG then NOWBIG = hlbig(NH, NL) end
  return NOWBIG
end
local function nowms()
  if not NOWMS then NOWMS = NH * 1000 + floor(NL / 1e6) end
  return NOWMS
end

-- fastrel is the instant h*10^9 + l counted from now in plain numbers,
-- or nil when it is FAST_LIMIT or more away.
local fastrel
do
  local REL_S = floor(FAST_LIMIT / 1e9) - 1
  function fastrel(h, l)
    local dh = h - NH
    if dh >= REL_S or dh <= -REL_S then return nil end
    return dh * 1e9 + (l - NL)
  end
end

-- fastabs is the instant now + d (|d| < FAST_LIMIT) as h, l, floored at 0.
local function fastabs(d)
  if d == 0 then return NH, NL end
  local c, l = fdiv(NL + d, 1e9)
  local h = NH + c
  if h < 0 then return 0, 0 end
  return h, l
end

-- fpack is a plain-number state's record numbers: tokens, fraction (h,
-- l), cursor (h, l).
local function fpack(t, f, a)
  local fh, fl, ah, al = 0, f, NH, NL
  if f >= 1e9 then fh, fl = fdiv(f, 1e9) end
  if a ~= 0 then ah, al = fastabs(a) end
  return t, fh, fl, ah, al
end

-- renewpx is the PX a bucket's key is written with when it must be full
-- in ms and its key surely lives to exp (ms on the shared clock, or
-- false): nil while that still covers ms and the tolerance tol (the TTL is
-- kept), else ms and twice the tolerance. nowms is now rounded down: a ms
-- more covers the full instant.
local function renewpx(ms, tol, exp)
  if exp and nowms() + 1 + ms + tol <= exp then return nil end
  return ms + 2 * tol
end

-- signed parses an optionally negative decimal: {neg = bool, m = bignum}.
local function signed(s)
  if string.sub(s, 1, 1) == '-' then return {neg = true, m = BN.num(string.sub(s, 2))} end
  return {neg = false, m = BN.num(s)}
end

-- back returns now - d for a signed bignum d, floored at 0.
local function back(d)
  local now = nowbig()
  if d.neg then return BN.add(now, d.m) end
  if BN.cmp(d.m, now) > 0 then return {} end
  return BN.sub(now, d.m)
end

-- activation is the instant (h, l) of a version activated at, a signed
-- ns offset back from now.
local function activation(at)
  if #at <= 15 then return fastabs(-tonumber(at)) end
  return bighl(back(signed(at)))
end

-- deccmp compares two decimal strings without leading zeros.
local function deccmp(x, y)
  if #x ~= #y then
    if #x < #y then return -1 end
    return 1
  end
  if x == y then return 0 end
  if x < y then return -1 end
  return 1
end

-- A bucket's record: REC_FORMAT's numbers, then the identity of the
-- version it was decided under (and, for a bucket with reservations,
-- HOLD_SEP and their mark: holds.lua).
local function readrec(rec)
  local t, fh, fl, ah, al, vh, vl, exp = struct.unpack(REC_FORMAT, rec)
  local ident = string.sub(rec, REC_BYTES + 1)
  local at = string.find(ident, HOLD_SEP, 1, true)
  if at then ident = string.sub(ident, 1, at - 1) end
  return t, fh, fl, ah, al, vh, vl, exp, ident
end
local writerec
do
  local REC_WRITE_FORMAT = REC_FORMAT .. 'c0' -- c0: the whole string
  function writerec(t, fh, fl, ah, al, vh, vl, exp, ident)
    return struct.pack(REC_WRITE_FORMAT, t, fh, fl, ah, al, vh, vl, exp, ident)
  end
end

-- readid splits an identity: revision, capacity, tokens, period, process
-- and version ID (decimal strings).
local readid
do
  local ID_PATTERN = '^' .. string.rep('([^' .. VER_SEP .. ']*)' .. VER_SEP, 5) .. '(.*)$'
  function readid(v) return string.match(v, ID_PATTERN) end
end

-- bigparams are params from an identity's decimals; c is the capacity,
-- with its debt bound after DEBT_SEP for a post-paid version (contract.go).
-- A budget's (rate 0: bucket.NewBudget) has no fraction: its p is 1, so
-- that its units (bucket.lua) are whole tokens.
local function bigparams(c, n, p)
  local d, dn = {}, 0
  local at = string.find(c, DEBT_SEP, 1, true)
  if at then
    d, dn = BN.num(string.sub(c, at + 1)), tonumber(string.sub(c, at + 1))
    c = string.sub(c, 1, at - 1)
  end
  local cap = BN.num(c)
  return {c = BN.add(cap, d), cap = cap, n = BN.num(n), p = BN.num(n == '0' and '1' or p), d = d, dn = dn}
end

-- chain parses an item's earlier versions (nearest first), each
-- "vid,cap,n,per,mode,delta" with delta its activation before the item's
-- version's (at, a bignum instant).
local function chain(s, at)
  local out = {}
  for e in string.gmatch(s, '[^' .. CHAIN_SEP .. ']+') do
    local f = {}
    for x in string.gmatch(e, '[^' .. FIELD_SEP .. ']+') do f[#f + 1] = x end
    local d = signed(f[6])
    local cat
    if d.neg then cat = BN.add(at, d.m) elseif BN.cmp(d.m, at) > 0 then cat = {} else cat = BN.sub(at, d.m) end
    out[#out + 1] = {v = f[1], p = bigparams(f[2], f[3], f[4]), mode = f[5], at = cat}
  end
  return out
end

-- dec is a reply value as a decimal: numbers below 2^53 or decimals.
local function dec(x)
  if type(x) == 'number' then return string.format('%.0f', x) end
  return x
end

-- record encodes a decision for a request id's replay:
-- "A|flags,remaining,retry,reset|..." from the reply's item fields, and
-- ",forgiven" after a report's that forgave some of its cost.
local function record(reply, n)
  local parts = {dec(reply[REPLY_ALLOWED])}
  for i = 0, n - 1 do
    local b = REPLY_HEAD + i * REPLY_ITEM_FIELDS
    local flags, forgiven = reply[b + REPLY_FLAGS], dec(reply[b + REPLY_EXTRA1])
    local e = dec(flags) .. FIELD_SEP .. dec(reply[b + REPLY_REMAINING]) .. FIELD_SEP ..
      dec(reply[b + REPLY_RETRY]) .. FIELD_SEP .. dec(reply[b + REPLY_RESET])
    if floor(flags / FLAG_REPORT) % 2 == 1 and forgiven ~= '0' then e = e .. FIELD_SEP .. forgiven end
    parts[#parts + 1] = e
  end
  return table.concat(parts, RECORD_SEP)
end

-- A batch (contract.go): its compact calls' contexts and versions, and
-- a compact call laid out as alone.

-- The batch's arguments (BARGS), the offset before its first version's
-- block (VBASE), each version's parameters in plain numbers and its
-- items' charge, or false (BFAST), each version's activation as h, l (BACT, 2 per version), and
-- each context's tolerance (BTOL): set once per batch. The three tables
-- are kept from batch to batch, so that they are not made anew for each:
-- a batch sets every entry its calls read (a call's context and versions
-- are the batch's: contract.go), and those beyond are never read.
local BARGS, VBASE, BFAST, BACT, BTOL = nil, nil, {}, {}, {}

-- readbatch reads a batch's contexts and versions (nc and nv of them).
-- A version's parameters are kept in the table the same version number
-- had in an earlier batch (FASTP, by number), filled anew.
local readbatch
do
  local FASTP = {}
  function readbatch(args, nc, nv)
    BARGS, VBASE = args, BATCH_HEAD + nc * HEADER_ARGS
    for i = 1, nc do BTOL[i] = tonumber(args[BATCH_HEAD + (i - 1) * HEADER_ARGS + ARG_TOLERANCE]) end
    for i = 1, nv do
      local vo = VBASE + (i - 1) * ITEM_ARGS
      local fp, act = args[vo + ITEM_FAST], args[vo + ITEM_AT]
      -- The activation, floored at 0 (as activation reads an offset).
      BACT[2 * i - 1], BACT[2 * i] = 0, 0
      if string.sub(act, 1, 1) ~= '-' then BACT[2 * i - 1], BACT[2 * i] = split(act) end
      BFAST[i] = false
      if fp ~= '' then
        -- k: the items' charge (itemMode). A budget (n = 0, whose waits
        -- are decimals: fast.lua) is left to the general path.
        local c, n, per, d = struct.unpack(FAST_FORMAT, fp)
        if n ~= 0 then
          local p = FASTP[i]
          if not p then
            p = {c = 0, n = 0, p = 0, d = 0, k = ''}
            FASTP[i] = p
          end
          p.c, p.n, p.p, p.d, p.k = c, n, per, d, string.sub(args[vo + ITEM_MODE], RESIZE_BYTES + 1)
          BFAST[i] = p
        end
      end
    end
  end
end

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
-- versions' blocks, with its own instant, floor, items, costs,
-- activations and horizons set (s from pos holds its items), as a
-- reserve when reserve is true.
local function classic(co, nh, nl, fh, fl, n, s, pos, reserve)
  local a = {unpack(BARGS, co + 1, co + HEADER_ARGS)}
  a[ARG_NOW], a[ARG_ITEMS], a[ARG_FLOOR] = hldec(nh, nl), string.format('%d', n), ''
  if reserve then a[ARG_OP] = OP_RESERVE end
  if fh >= 0 then a[ARG_FLOOR] = hldec(fh, fl) end
  for i = 1, n do
    local vi, cost
    vi, cost, pos = struct.unpack(CALL_ITEM_FORMAT, s, pos)
    local vo, b = VBASE + (vi - 1) * ITEM_ARGS, HEADER_ARGS + (i - 1) * ITEM_ARGS
    for f = 1, ITEM_ARGS do a[b + f] = BARGS[vo + f] end
    a[b + ITEM_COST], a[b + ITEM_AT] = string.format('%.0f', cost), atoffset(nh, nl, BARGS[vo + ITEM_AT])
    -- A horizon, an instant here, is ns from now there (0 once past).
    local hz = a[b + ITEM_HORIZON]
    if hz ~= '' then
      hz = atoffset(nh, nl, hz)
      a[b + ITEM_HORIZON] = string.sub(hz, 1, 1) == '-' and string.sub(hz, 2) or '0'
    end
  end
  return a
end

-- packreply packs a lean reply of n items (contract.go): reply holds
-- allowed, then each item's fields. PACKED keeps its struct format by n;
-- struct.pack and unpack are upvalues, as in leandecide (lean.lua).
local packreply
do
  local PACKED, spack, tunpack = {}, struct.pack, unpack
  function packreply(reply, n)
    local m = 1 + REPLY_ITEM_FIELDS * n
    local fmt = PACKED[n]
    if not fmt then
      fmt = '<' .. string.rep(PACKED_NUMBER, m)
      PACKED[n] = fmt
    end
    return spack(fmt, tunpack(reply, 1, m))
  end
end

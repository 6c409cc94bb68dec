-- codec: the script's side of the Go<->Lua contract (contract.go defines
-- every position, separator and constant; they are the locals generated
-- above): the clock, instants, the arguments, the bucket record, the
-- version string and chain, the reply and the replay record.
--
-- Everything here and above is defined once, when Redis loads the
-- library; a call sets the per-call state (KEYS, ARGV, the clock) first.
local KEYS, ARGV

-- split reads a decimal instant as h*10^9 + l, both exact numbers.
local function split(s)
  local n = #s
  if n <= 9 then return 0, tonumber(s) end
  return tonumber(string.sub(s, 1, n - 9)), tonumber(string.sub(s, n - 8))
end

-- The clock, read once per call: now = NH*10^9 + NL ns (Redis TIME, or
-- the request's biased instant); NOWSTR is its decimal, NOWBIG its bignum
-- once needed.
local NH, NL, NOWSTR, NOWBIG
local function clock()
  NOWBIG = nil
  if ARGV[ARG_NOW] == '' then
    local t = redis.call('TIME')
    NH, NL = tonumber(t[1]), tonumber(t[2]) * 1000
    NOWSTR = string.format('%.0f%09.0f', NH, NL)
  else
    NOWSTR = ARGV[ARG_NOW]
    NH, NL = split(NOWSTR)
  end
end
local function nowbig()
  if not NOWBIG then NOWBIG = num(NOWSTR) end
  return NOWBIG
end

-- fastrel is the instant s counted from now in plain numbers, or nil when
-- it is FAST_LIMIT or more away.
local REL_S = floor(FAST_LIMIT / 1e9) - 1
local function fastrel(s)
  local h, l = split(s)
  local dh = h - NH
  if dh >= REL_S or dh <= -REL_S then return nil end
  return dh * 1e9 + (l - NL)
end

-- fastabs is the decimal of now + d (|d| < FAST_LIMIT), floored at 0.
local function fastabs(d)
  if d == 0 then return NOWSTR end
  local c, l = fdiv(NL + d, 1e9)
  local h = NH + c
  if h < 0 then return '0' end
  if h == 0 then return string.format('%.0f', l) end
  return string.format('%.0f%09.0f', h, l)
end

-- signed parses an optionally negative decimal: {neg = bool, m = bignum}.
local function signed(s)
  if string.sub(s, 1, 1) == '-' then return {neg = true, m = num(string.sub(s, 2))} end
  return {neg = false, m = num(s)}
end

-- back returns now - d for a signed bignum d, floored at 0.
local function back(d)
  local now = nowbig()
  if d.neg then return add(now, d.m) end
  if cmp(d.m, now) > 0 then return {} end
  return sub(now, d.m)
end

-- activation is the decimal instant of a version activated at (a signed
-- ns offset back from now).
local function activation(at)
  if #at <= 15 then return fastabs(-tonumber(at)) end
  return str(back(signed(at)))
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

-- item reads item i's arguments (strings; each path parses what it uses).
local function item(i)
  local b = HEADER_ARGS + (i - 1) * ITEM_ARGS
  return {
    cost = ARGV[b + ITEM_COST], at = ARGV[b + ITEM_AT], vid = ARGV[b + ITEM_VID], ver = ARGV[b + ITEM_VERSION],
    c = ARGV[b + ITEM_CAP], n = ARGV[b + ITEM_N], p = ARGV[b + ITEM_PER], mode = ARGV[b + ITEM_MODE],
    chain = ARGV[b + ITEM_CHAIN],
  }
end

-- A bucket is one string: tokens, frac, cursor, the activation of its
-- version, the process and version ID that wrote it, and the version
-- string (revision and parameters, as the items carry it).
local NOTSEP = '([^' .. REC_SEP .. ']*)' .. REC_SEP
local REC_PATTERN = '^' .. string.rep(NOTSEP, 6) .. '(.*)$'
local function readrec(rec) return string.match(rec, REC_PATTERN) end
-- writerec takes the balance already encoded: "tokens,frac,cursor".
local function writerec(balance, act, pid, vid, ver)
  return balance .. REC_SEP .. act .. REC_SEP .. pid .. REC_SEP .. vid .. REC_SEP .. ver
end

-- readver splits a version string: revision, capacity, tokens, period.
local VER_PATTERN = '^' .. string.rep('([^' .. VER_SEP .. ']*)' .. VER_SEP, 3) .. '(.*)$'
local function readver(v) return string.match(v, VER_PATTERN) end

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
    if d.neg then cat = add(at, d.m) elseif cmp(d.m, at) > 0 then cat = {} else cat = sub(at, d.m) end
    out[#out + 1] = {v = f[1], p = {c = num(f[2]), n = num(f[3]), p = num(f[4])}, mode = f[5], at = cat}
  end
  return out
end

-- dec is a reply value as a decimal: numbers below 2^53 or decimals.
local function dec(x)
  if type(x) == 'number' then return string.format('%.0f', x) end
  return x
end

-- record encodes a decision for a request id's replay:
-- "A|flags,remaining,retry,reset|..." from the reply's item fields.
local function record(reply, n)
  local parts = {dec(reply[REPLY_ALLOWED])}
  for i = 0, n - 1 do
    local b = REPLY_HEAD + i * REPLY_ITEM_FIELDS
    parts[#parts + 1] = dec(reply[b + REPLY_FLAGS]) .. FIELD_SEP .. dec(reply[b + REPLY_REMAINING]) .. FIELD_SEP ..
      dec(reply[b + REPLY_RETRY]) .. FIELD_SEP .. dec(reply[b + REPLY_RESET])
  end
  return table.concat(parts, RECORD_SEP)
end

-- decide: one call decides (op 'd'), reserves (op 'r') or settles (op 's')
-- buckets that live in one hash slot. See doc.go for the design and
-- args.go for the argument layout, which this file must match.
if redis.replicate_commands then pcall(redis.replicate_commands) end

local H = 11 -- header arguments
local op, nowarg, floorarg, expire, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
local idmode, window, pendingms, nitems = ARGV[6], ARGV[7], ARGV[8], tonumber(ARGV[9])
local fp, maxreplays = ARGV[10], ARGV[11]
local FIELDS = {'t', 'f', 'a', 'c', 'n', 'p', 'r', 'i', 'v', 's'}

local now
if nowarg == '' then
  local t = redis.call('TIME')
  now = num(t[1] .. string.format('%06d', tonumber(t[2])) .. '000')
else
  now = num(nowarg)
end
local floor0 = nil
if floorarg ~= '' then floor0 = num(floorarg) end
local forgot = nil

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

-- signed parses an optionally negative decimal: {neg = bool, m = bignum}.
local function signed(s)
  if string.sub(s, 1, 1) == '-' then return {neg = true, m = num(string.sub(s, 2))} end
  return {neg = false, m = num(s)}
end

-- back returns now - d for a signed d, floored at 0.
local function back(d)
  if d.neg then return add(now, d.m) end
  if cmp(d.m, now) > 0 then return {} end
  return sub(now, d.m)
end

local function ms(ns)
  local q, r = divmod(ns, {1000000})
  if not iszero(r) then q = add(q, {1}) end
  return str(q)
end

-- chain parses "vid,cap,n,per,mode,delta;..." (nearest version first);
-- delta is the version's activation before the item's own version's.
local function chain(s, at)
  local out = {}
  for e in string.gmatch(s, '[^;]+') do
    local f = {}
    for x in string.gmatch(e, '[^,]+') do f[#f + 1] = x end
    local d = signed(f[6])
    local cat
    if d.neg then cat = add(at, d.m) elseif cmp(d.m, at) > 0 then cat = {} else cat = sub(at, d.m) end
    out[#out + 1] = {v = f[1], p = {c = num(f[2]), n = num(f[3]), p = num(f[4])}, mode = f[5], at = cat}
  end
  return out
end

-- item reads item i's arguments.
local function item(i)
  local b = H + (i - 1) * 9
  return {
    cost = signed(ARGV[b + 1]), rev = ARGV[b + 2], at = back(signed(ARGV[b + 3])),
    vid = ARGV[b + 4], p = {c = num(ARGV[b + 5]), n = num(ARGV[b + 6]), p = num(ARGV[b + 7])},
    mode = ARGV[b + 8], chain = ARGV[b + 9],
  }
end

-- load returns the bucket at key brought to the version it is decided
-- under and refilled to now: {p, id, s, new}. The version is the item's,
-- unless the stored one is newer: a higher revision, or at the same
-- revision a higher version ID of this process, or another process's
-- version activated later (see doc.go). A bucket never moves back.
local function load(key, it)
  local mine = {r = it.rev, i = pid, v = it.vid, s = it.at}
  local h = redis.call('HMGET', key, unpack(FIELDS))
  if not h[1] then
    local at = now
    if floor0 and cmp(floor0, now) > 0 then at = floor0 end
    return {p = it.p, id = mine, s = full(it.p, at), new = true}
  end
  local s = {t = num(h[1]), f = num(h[2]), a = num(h[3])}
  local sp = {c = num(h[4]), n = num(h[5]), p = num(h[6])}
  local sid = {r = h[7], i = h[8], v = h[9], s = h[10]}
  local move, walk = false, false
  local c = deccmp(it.rev, sid.r)
  if c > 0 then
    move = true
  elseif c == 0 then
    if sid.i == pid then
      if deccmp(it.vid, sid.v) > 0 then move, walk = true, true end
    elseif sameparams(sp, it.p) then
      return {p = it.p, id = mine, s = refill(it.p, s, now)}
    elseif cmp(it.at, num(sid.s)) > 0 then
      move = true
    end
  end
  if not move then return {p = sp, id = sid, s = refill(sp, s, now), keep = true} end
  local done = false
  if walk and it.chain ~= '' then
    local ch = chain(it.chain, it.at)
    for k = 1, #ch do
      if ch[k].v == sid.v then
        -- bucket.Version.Bring: each later version refills up to its
        -- activation and converts under its own on_resize.
        for j = k - 1, 1, -1 do s = transition(s, ch[j + 1].p, ch[j].p, ch[j].at, ch[j].mode) end
        s = transition(s, ch[1].p, it.p, it.at, it.mode)
        done = true
        break
      end
    end
  end
  if not done then s = transition(s, sp, it.p, it.at, it.mode) end
  return {p = it.p, id = mine, s = refill(it.p, s, now)}
end

local function raise(at)
  if not forgot or cmp(at, forgot) > 0 then forgot = at end
end

-- store writes a bucket's final state; ttl is the time until it is full.
-- With expiry the key lives exactly that long; without (tests that drive
-- time), keys stay, and a new bucket that is full is not stored: its
-- cursor is reported so that the caller can start later new buckets no
-- earlier. keep: parameters and version are those already stored.
local function store(key, p, id, st, new, keep, ttl)
  if expire then
    if iszero(ttl) then
      if not new then redis.call('DEL', key) end
      return
    end
  elseif new and cmp(st.t, p.c) >= 0 then
    raise(st.a)
    return
  end
  if keep then
    redis.call('HSET', key, 't', str(st.t), 'f', str(st.f), 'a', str(st.a))
  else
    local act = id.s
    if type(act) == 'table' then act = str(act) end
    redis.call('HSET', key, 't', str(st.t), 'f', str(st.f), 'a', str(st.a), 'c', str(p.c), 'n', str(p.n),
      'p', str(p.p), 'r', id.r, 'i', id.i, 'v', id.v, 's', act)
  end
  if expire then redis.call('PEXPIRE', key, ms(ttl)) end
end

local function forgotstr()
  if forgot then return str(forgot) end
  return ''
end

if op == 's' then
  -- settle: add units (in 1/per of a token) back to buckets, capped at
  -- capacity: the rollback of a reservation, or a deferred refund.
  for i = 1, nitems do
    local b = H + (i - 1) * 3
    local key = KEYS[i]
    local h = redis.call('HMGET', key, unpack(FIELDS))
    if h[1] then
      local s = {t = num(h[1]), f = num(h[2]), a = num(h[3])}
      local p = {c = num(h[4]), n = num(h[5]), p = num(h[6])}
      local id = {r = h[7], i = h[8], v = h[9], s = h[10]}
      s = refill(p, s, now)
      local u, per = num(ARGV[b + 1]), num(ARGV[b + 2])
      if cmp(per, p.p) ~= 0 then u = divmod(mul(u, p.p), per) end
      s = fromunits(p, add(units(p, s), u), s.a)
      if ARGV[b + 3] == '1' and not expire and cmp(s.t, p.c) >= 0 then
        redis.call('DEL', key)
        raise(s.a)
      else
        store(key, p, id, s, false, true, untilfull(p, s, now))
      end
    end
  end
  if idmode == '1' then
    redis.call('HSET', KEYS[nitems + 1], 'rec', ARGV[H + nitems * 3 + 1])
    redis.call('PEXPIRE', KEYS[nitems + 1], window)
  elseif idmode == '2' then
    redis.call('DEL', KEYS[nitems + 1])
  end
  return {0, '', forgotstr()}
end

-- A request id: replay its answer when the same buckets and costs (fp)
-- ask again, at most maxreplays times; anything else is decided anew and
-- not recorded. A reserve claims a new id ('pending') for its settle.
local record = false
if idmode ~= '0' then
  local idk = KEYS[nitems + 1]
  local h = redis.call('HMGET', idk, 'fp', 'left', 'rec')
  if h[1] then
    if h[1] == fp then
      if h[3] == 'pending' then return {2} end
      if tonumber(h[2]) > 0 then
        redis.call('HINCRBY', idk, 'left', -1)
        return {1, h[3]}
      end
    end
  else
    record = true
    if op == 'r' then
      redis.call('HSET', idk, 'fp', fp, 'left', maxreplays, 'rec', 'pending')
      redis.call('PEXPIRE', idk, pendingms)
    end
  end
end

-- Decide every item in order on its bucket's running state.
local works, order = {}, {}
local res = {}
local allowed = true
for i = 1, nitems do
  local key = KEYS[i]
  local it = item(i)
  local w = works[key]
  if not w then
    w = load(key, it)
    w.key, w.idx, w.cur = key, i, w.s
    works[key] = w
    order[#order + 1] = w
  end
  local ok, never, rem, retry
  w.cur, ok, never, rem, retry = decide(w.p, w.cur, now, it.cost)
  res[i] = {ok = ok, never = never, rem = rem, retry = retry, after = w.cur, w = w}
  allowed = allowed and ok
end

-- resetr is a bucket's time until full should nothing be charged.
local function resetr(w)
  if not w.resetr then w.resetr = untilfull(w.p, w.s, now) end
  return w.resetr
end

local parts = {allowed and '1' or '0'}
for i = 1, nitems do
  local r = res[i]
  local rem, reset = r.rem, nil
  if allowed or op == 'r' then
    reset = untilfull(r.w.p, r.after, now)
    r.w.reseta = reset -- the last item's is the bucket's
  end
  local remr = rem
  if not r.never then remr = r.w.s.t end
  if op == 'd' and not allowed then rem, reset = remr, resetr(r.w) end
  local f = {r.ok and '1' or '0', r.never and '1' or '0', str(rem), str(r.retry), str(reset)}
  if op == 'r' then f[6], f[7] = str(remr), str(resetr(r.w)) end
  parts[#parts + 1] = table.concat(f, ',')
end
local rec = table.concat(parts, '|')

-- Write: charged states when allowed, refilled ones when not. A reserve
-- never shows a balance above what either outcome leaves: a bucket whose
-- net effect is a refund keeps its refilled state until the settle.
local settle = {}
for k = 1, #order do
  local w = order[k]
  local st, ttl = w.s, nil
  if allowed then
    st, ttl = w.cur, w.reseta
    if op == 'r' then
      local ur, ua = units(w.p, w.s), units(w.p, w.cur)
      local c = cmp(ua, ur)
      if c > 0 then
        st, ttl = w.s, nil
        settle[#settle + 1] = w.idx .. ',c,' .. str(sub(ua, ur)) .. ',' .. str(w.p.p) .. ',' .. (w.new and '1' or '0')
      elseif c < 0 then
        settle[#settle + 1] = w.idx .. ',u,' .. str(sub(ur, ua)) .. ',' .. str(w.p.p) .. ',' .. (w.new and '1' or '0')
      end
    end
  end
  if not ttl and expire then ttl = resetr(w) end
  store(w.key, w.p, w.id, st, w.new, w.keep, ttl)
end

if op == 'd' and record then
  redis.call('HSET', KEYS[nitems + 1], 'fp', fp, 'left', maxreplays, 'rec', rec)
  redis.call('PEXPIRE', KEYS[nitems + 1], window)
end
return {0, rec, forgotstr(), table.concat(settle, ';'), record and '1' or '0'}

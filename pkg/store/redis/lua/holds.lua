-- holds: a bucket's reservations (store.go, "Reservations"; the hash and
-- the record's mark: contract.go, holdsSuffix). A work (ops) carries its
-- bucket's mark in w.hold: an instant at or before the earliest expiry of
-- its reservations (decimal, on the script's clock), or false for none.
-- The mark may be early (a settled reservation leaves it): then the hash
-- is read and the mark set again. Every instant here is the call's, so
-- one clock decides buckets and reservations alike. The functions are
-- fields of one table (the chunk's locals: TestLuaLocals).
local HOLDS = {}
do
  local function hkey(w) return w.key .. HOLDS_SUFFIX end
  local function now() return hldec(NH, NL) end

  -- parse splits a reservation's value: tokens and expiry (decimals).
  local function parse(v)
    local at = string.find(v, FIELD_SEP, 1, true)
    return string.sub(v, 1, at - 1), string.sub(v, at + 1)
  end

  -- live makes the hash of w's bucket live at least ms more (with
  -- expiry): as long as the record that marks it, and a reservation's
  -- lifetime and twice the tolerance, so that no reservation is lost
  -- while its bucket may still owe it back.
  function HOLDS.live(w, ms)
    local k = hkey(w)
    if redis.call('PTTL', k) < ms then redis.call('PEXPIRE', k, string.format('%d', ms)) end
  end

  -- mark is the mark of a bucket's record rec, or false.
  function HOLDS.mark(rec)
    local at = string.find(rec, HOLD_SEP, REC_BYTES + 1, true)
    return at and string.sub(rec, at + 1) or false
  end

  -- due returns to w, loaded and refilled to now, every reservation of
  -- its bucket that has expired by now, each exactly as a refund of its
  -- tokens (capped at capacity), and marks the bucket anew. A refund and
  -- a refill each add and cap, so returning them after the refill to now
  -- leaves what returning each at its expiry first would.
  function HOLDS.due(w)
    local t = now()
    if not w.hold or deccmp(t, w.hold) < 0 then return end
    local k, E = hkey(w), w.E
    local all, gone, mark = redis.call('HGETALL', k), {}, false
    for j = 1, #all, 2 do
      local n, e = parse(all[j + 1])
      if deccmp(e, t) <= 0 then
        w.s = E.decide(w.p, w.s, E.cost('-' .. n))
        gone[#gone + 1] = all[j]
      elseif not mark or deccmp(e, mark) < 0 then
        mark = e
      end
    end
    if #gone > 0 then redis.call('HDEL', k, unpack(gone)) end
    w.cur, w.hold, w.dirty = w.s, mark, true
  end

  -- find is this request's live reservation of w's bucket: its tokens
  -- (decimal) or nil. An expired one still there is one whose bucket's
  -- record (and mark) expired: gone too.
  function HOLDS.find(w)
    local id = ARGV[ARG_HOLD]
    if id == '' then return nil end
    local v = redis.call('HGET', hkey(w), id)
    if not v then return nil end
    local n, e = parse(v)
    if deccmp(e, now()) <= 0 then return nil end
    return n
  end

  -- settle removes this request's reservation of w's bucket and returns
  -- cost (a decimal) less its tokens: what the report is charged.
  function HOLDS.settle(w, cost)
    local n = HOLDS.find(w)
    if not n then return cost end
    redis.call('HDEL', hkey(w), ARGV[ARG_HOLD])
    local c, m = signed(cost), BN.num(n)
    if c.neg then return '-' .. BN.str(BN.add(c.m, m)) end
    if BN.cmp(c.m, m) >= 0 then return BN.str(BN.sub(c.m, m)) end
    return '-' .. BN.str(BN.sub(m, c.m))
  end

  -- add records the reservation that the item at ARGV index w.reserve
  -- took (its tokens, its lifetime from now: itemMode) and marks the
  -- bucket; it returns the tokens (decimal). The bucket is then written
  -- (put), which makes the hash live w.holdms.
  function HOLDS.add(w)
    local b = w.reserve
    local n, ttl = ARGV[b + ITEM_COST], string.sub(ARGV[b + ITEM_MODE], RESIZE_BYTES + 2)
    local h, l = split(ttl)
    h, l = NH + h, NL + l
    if l >= 1e9 then h, l = h + 1, l - 1e9 end
    local e = hldec(h, l)
    redis.call('HSET', hkey(w), ARGV[ARG_HOLD], n .. FIELD_SEP .. e)
    if not w.hold or deccmp(e, w.hold) < 0 then w.hold = e end
    w.holdms = floor(tonumber(ttl) / 1e6) + 1 + 2 * tonumber(ARGV[ARG_TOLERANCE])
    return n
  end

  -- unhold is a rollback's (settleop) units u (bignum, in 1/p.p of a
  -- token) to add back to bucket key's balance, in units s, less the
  -- request's reservation of n tokens (decimal): removed; or, when it is
  -- gone already (returned at its expiry, or settled by its report), the
  -- n tokens it took are back or paid for, so n fewer are added (a
  -- charge, down to the debt bound, when that is below zero). It returns
  -- the new balance in units, and whether the bucket holds reservations
  -- still.
  function HOLDS.unhold(key, p, s, u, n)
    local k = key .. HOLDS_SUFFIX
    local t = BN.add(s, u)
    if redis.call('HDEL', k, ARGV[ARG_HOLD]) == 0 then
      local nu = BN.mul(BN.num(n), p.p)
      if BN.cmp(t, nu) < 0 then t = {} else t = BN.sub(t, nu) end
    end
    return t, redis.call('EXISTS', k) == 1
  end
end

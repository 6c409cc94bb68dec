package redis

import (
	"context"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/internal/redistest"
)

// bignumDriver runs batches of bignum operations: ARGV is op, a, b, ...
// and the reply is one result string per operation.
const bignumDriver = `
local out = {}
for i = 1, #ARGV, 3 do
  local op, a, b = ARGV[i], BN.num(ARGV[i + 1]), BN.num(ARGV[i + 2])
  if op == 'add' then out[#out + 1] = BN.str(BN.add(a, b))
  elseif op == 'sub' then out[#out + 1] = BN.str(BN.sub(a, b))
  elseif op == 'mul' then out[#out + 1] = BN.str(BN.mul(a, b))
  elseif op == 'cmp' then out[#out + 1] = tostring(BN.cmp(a, b))
  elseif op == 'div' then
    local q, r = BN.divmod(a, b)
    out[#out + 1] = BN.str(q) .. ' ' .. BN.str(r)
  end
end
return out`

// TestBignum checks the script's integers against math/big, in the real
// base (10^7) and in base 10, where the rare steps of long division (the
// quotient estimate off by two, the add-back) happen all the time.
func TestBignum(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv.Addr())
	for _, dig := range []string{"7", "1", "2"} {
		t.Run("base 10^"+dig, func(t *testing.T) {
			src := strings.Replace(luaBignum, "local DIG = 7", "local DIG = "+dig, 1) + bignumDriver
			rng := rand.New(rand.NewPCG(1, uint64(len(dig))))
			for batch := range 40 {
				var args []string
				var want []string
				for range 250 {
					a, b := randBig(rng), randBig(rng)
					op := []string{"add", "sub", "mul", "cmp", "div"}[rng.IntN(5)]
					switch op {
					case "add":
						want = append(want, new(big.Int).Add(a, b).String())
					case "sub":
						if a.Cmp(b) < 0 {
							a, b = b, a
						}
						want = append(want, new(big.Int).Sub(a, b).String())
					case "mul":
						want = append(want, new(big.Int).Mul(a, b).String())
					case "cmp":
						want = append(want, big.NewInt(int64(a.Cmp(b))).String())
					case "div":
						if b.Sign() == 0 {
							b.SetInt64(1)
						}
						q, r := new(big.Int).QuoRem(a, b, new(big.Int))
						want = append(want, q.String()+" "+r.String())
					}
					args = append(args, op, a.String(), b.String())
				}
				got, err := c.Do(context.Background(), c.B().Eval().Script(src).Numkeys(0).Arg(args...).Build()).AsStrSlice()
				if err != nil {
					t.Fatal(err)
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("batch %d: %s %s %s = %s, want %s", batch, args[3*i], args[3*i+1], args[3*i+2], got[i], want[i])
					}
				}
			}
		})
	}
}

// randBig draws integers of up to 240 bits, favouring the edges of limb
// boundaries: powers of ten and two, and their neighbours.
func randBig(rng *rand.Rand) *big.Int {
	x := new(big.Int)
	switch rng.IntN(4) {
	case 0:
		x.Exp(big.NewInt(10), big.NewInt(int64(rng.IntN(60))), nil)
	case 1:
		x.Lsh(big.NewInt(1), uint(rng.IntN(200)))
	default:
		for range 1 + rng.IntN(4) {
			x.Lsh(x, 60)
			x.Add(x, new(big.Int).SetUint64(rng.Uint64()>>4))
		}
		x.Rsh(x, uint(rng.IntN(200)))
		return x
	}
	switch rng.IntN(3) {
	case 0:
		x.Sub(x, big.NewInt(1))
	case 1:
		x.Add(x, big.NewInt(int64(rng.IntN(1000))))
	}
	if x.Sign() < 0 {
		x.SetInt64(0)
	}
	return x
}

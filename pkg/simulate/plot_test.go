package simulate

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/tokengate/tokengate/pkg/policy"
)

// burstTrace is 60 s of requests from three users: a steady one, one in
// bursts every 10 s, and one ramping up, and a path everyone hits.
func burstTrace() []byte {
	var b strings.Builder
	b.WriteString(header)
	for ms := int64(0); ms < 60_000; ms += 50 {
		at := FormatSeconds(ms * 1e6)
		b.WriteString(at + ",edge,user=steady|path=/api,\n")
		if ms%10_000 < 1000 {
			b.WriteString(at + ",edge,user=bursty,\n")
		}
		if ms%(1000-ms/100) < 50 {
			b.WriteString(at + ",edge,user=ramp|probe=p,\n")
		}
	}
	return []byte(b.String())
}

// TestPlot: the figure is a PNG of the size its layout asks for, with
// lines in several colours on it, for one policy and for two.
func TestPlot(t *testing.T) {
	live := parsePolicy(t, "live.yaml", testPolicy)
	raised := parsePolicy(t, "raised.yaml", strings.Replace(testPolicy, "capacity: 10", "capacity: 30", 1))
	for _, pols := range [][]*policy.Policy{{live}, {live, raised}} {
		res, err := Run(context.Background(), BytesTrace("t.csv", burstTrace()), pols, RunOptions{Hot: 3})
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := WritePNG(&buf, res); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("not a PNG: %v", err)
		}
		// 96 dpi: 4/3 pixel a point.
		if b, h := img.Bounds(), int(layout(res).height().Points()*4/3+0.5); b.Dx() != 1056 || b.Dy() != h {
			t.Errorf("size %v, want 1056x%d (11 in wide at 96 dpi)", b, h)
		}
		colours := map[[4]uint32]int{}
		for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y += 2 {
			for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x += 2 {
				r, g, b, a := img.At(x, y).RGBA()
				colours[[4]uint32{r, g, b, a}]++
			}
		}
		// White background, black axes and text, and a colour per line.
		if len(colours) < 20 {
			t.Errorf("%d distinct colours: want the lines of several rules", len(colours))
		}
		if out := os.Getenv("SIMULATE_PLOT_OUT"); out != "" {
			os.WriteFile(out+strconv.Itoa(len(pols))+".png", buf.Bytes(), 0o644)
		}
	}
}

package simulate

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Request is one line of a trace: a rate-limit request at an instant.
type Request struct {
	Line        int   // where it is in the trace, from 1
	At          int64 // nanoseconds from the trace's start
	Domain      string
	Descriptors []*ratelimitv3.RateLimitDescriptor
}

// Reader reads a trace, CSV or JSON lines (the package comment), one
// request at a time. Requests must be in time order. It is not safe for
// concurrent use.
type Reader struct {
	name  string
	read  func(*Request) error
	last  int64
	pool  descriptorPool
	lines int         // JSON lines: lines read
	json  jsonRequest // JSON lines: the line being read
}

// maxLine is the longest JSON line a Reader accepts.
const maxLine = 16 << 20

// NewReader returns a Reader of the trace r; name names it in errors. The
// format is told from the first byte that is not white space: "{" is JSON
// lines, anything else CSV.
func NewReader(name string, r io.Reader) *Reader {
	tr := &Reader{name: name}
	br := bufio.NewReaderSize(r, 64<<10)
	head, _ := br.Peek(4096)
	if t := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\ufeff")), " \t\r\n"); len(t) > 0 && t[0] == '{' {
		sc := bufio.NewScanner(br)
		sc.Buffer(make([]byte, 0, 64<<10), maxLine)
		tr.read = func(req *Request) error { return tr.readJSON(sc, req) }
	} else {
		cr := csv.NewReader(br)
		cr.ReuseRecord, cr.Comment = true, '#'
		tr.read = func(req *Request) error { return tr.readCSV(cr, req) }
	}
	return tr
}

// Read reads the next request into req; it returns io.EOF after the last.
// req's descriptors are the Reader's, valid until the next Read. An error
// names the trace, the line and what is wrong with it.
func (tr *Reader) Read(req *Request) error {
	tr.pool.reset()
	err := tr.read(req)
	switch {
	case err != nil:
		return err
	case req.At < tr.last:
		return tr.fail(req.Line, fmt.Errorf("t %s is before the line above's %s: a trace is in time order", FormatSeconds(req.At), FormatSeconds(tr.last)))
	}
	tr.last = req.At
	return nil
}

func (tr *Reader) fail(line int, err error) error {
	return fmt.Errorf("%s:%d: %w", tr.name, line, err)
}

// csvHeader is the CSV header row; the hits column may be left out.
var csvHeader = []string{"t", "domain", "entries", "hits"}

func (tr *Reader) readCSV(cr *csv.Reader, req *Request) error {
	if cr.FieldsPerRecord == 0 {
		if err := tr.readHeader(cr); err != nil {
			return err
		}
	}
	rec, err := cr.Read()
	if err != nil {
		return tr.csvError(cr, rec, err)
	}
	req.Line, _ = cr.FieldPos(0)
	hits := ""
	if len(rec) == 4 {
		hits = rec[3]
	}
	if err := tr.fill(req, rec[0], rec[1], hits, rec[2], nil); err != nil {
		return tr.fail(req.Line, err)
	}
	return nil
}

func (tr *Reader) readHeader(cr *csv.Reader) error {
	cr.FieldsPerRecord = -1
	rec, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: empty trace: want a header row %s, or JSON lines", tr.name, strings.Join(csvHeader, ","))
	} else if err != nil {
		return tr.csvError(cr, rec, err)
	}
	line, _ := cr.FieldPos(0)
	n := len(rec)
	if n == 3 || n == 4 {
		for i := range rec {
			if strings.TrimSpace(strings.TrimPrefix(rec[i], "\ufeff")) != csvHeader[i] {
				n = 0
			}
		}
	}
	if n != 3 && n != 4 {
		return tr.fail(line, fmt.Errorf("header %q: want %s (hits may be left out)", strings.Join(rec, ","), strings.Join(csvHeader, ",")))
	}
	cr.FieldsPerRecord = n
	return nil
}

// csvError is err, of reading rec, with the trace's name and line.
func (tr *Reader) csvError(cr *csv.Reader, rec []string, err error) error {
	var pe *csv.ParseError
	switch {
	case errors.Is(err, io.EOF):
		return io.EOF
	case errors.As(err, &pe) && errors.Is(pe.Err, csv.ErrFieldCount):
		return tr.fail(pe.Line, fmt.Errorf("%d fields: want %d (%s)", len(rec), cr.FieldsPerRecord, strings.Join(csvHeader[:cr.FieldsPerRecord], ",")))
	case errors.As(err, &pe):
		return tr.fail(pe.Line, pe.Err)
	}
	return fmt.Errorf("%s: %w", tr.name, err)
}

// csvEntries reads key=value;key=value|key=value into req: descriptors
// separated by "|", entries by ";", each entry's key from its value by the
// first "=".
func (tr *Reader) csvEntries(req *Request, s string) error {
	if s == "" {
		return errors.New("entries: no descriptors")
	}
	i := 0
	for ds := range strings.SplitSeq(s, "|") {
		d := tr.descriptor(req)
		for e := range strings.SplitSeq(ds, ";") {
			k, v, ok := strings.Cut(e, "=")
			if !ok || k == "" {
				return fmt.Errorf("entries: descriptor %d: entry %q: want key=value", i, e)
			}
			d.Entries = append(d.Entries, tr.pool.entry(k, v))
		}
		i++
	}
	return nil
}

// jsonEntries reads a JSON line's descriptors into req.
func (tr *Reader) jsonEntries(req *Request, j *jsonRequest) error {
	if len(j.Descriptors) == 0 {
		return errors.New(`"descriptors": none`)
	}
	for _, entries := range j.Descriptors {
		d := tr.descriptor(req)
		for _, e := range entries {
			d.Entries = append(d.Entries, tr.pool.entry(e.Key, e.Value))
		}
	}
	return nil
}

// descriptor adds a descriptor to req.
func (tr *Reader) descriptor(req *Request) *ratelimitv3.RateLimitDescriptor {
	d := tr.pool.descriptor()
	req.Descriptors = append(req.Descriptors, d)
	return d
}

// jsonRequest is one JSON line. A Reader decodes every line into the
// same one, so that its lists keep their room from line to line.
type jsonRequest struct {
	T           json.Number `json:"t"`
	Domain      string      `json:"domain"`
	Descriptors [][]struct {
		Key   string `json:"key"`
		Value string `json:"value"`
	} `json:"descriptors"`
	// Hits is a number (every descriptor's), a list (one per descriptor,
	// null for none) or, absent or null, nothing.
	Hits json.RawMessage `json:"hits"`
}

func (tr *Reader) readJSON(sc *bufio.Scanner, req *Request) error {
	for sc.Scan() {
		tr.lines++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		req.Line = tr.lines
		j := &tr.json
		j.T, j.Domain, j.Descriptors, j.Hits = "", "", j.Descriptors[:0], j.Hits[:0]
		if err := json.Unmarshal(line, j); err != nil {
			return tr.fail(req.Line, err)
		}
		if j.T == "" {
			return tr.fail(req.Line, errors.New(`"t" is missing`))
		}
		hits, err := jsonHits(j.Hits, len(j.Descriptors))
		if err == nil {
			err = tr.fill(req, j.T.String(), j.Domain, hits, "", j)
		}
		if err != nil {
			return tr.fail(req.Line, err)
		}
		return nil
	}
	if err := sc.Err(); err != nil {
		return tr.fail(tr.lines+1, err)
	}
	return io.EOF
}

// jsonHits is a JSON line's "hits" as the CSV column writes it: a number
// as it is, a list (one per descriptor of the line's n) as its elements
// separated by "|", null as empty.
func jsonHits(raw json.RawMessage, n int) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "", nil
	}
	bad := func() error {
		return fmt.Errorf(`"hits": %s: want a whole number, or a list of one per descriptor (null for none)`, raw)
	}
	if raw[0] != '[' {
		var h json.Number
		if json.Unmarshal(raw, &h) != nil {
			return "", bad()
		}
		return h.String(), nil
	}
	var hs []*json.Number
	if err := json.Unmarshal(raw, &hs); err != nil {
		return "", bad()
	}
	if len(hs) != n {
		return "", fmt.Errorf(`"hits": %d values for %d descriptors: want one per descriptor, or a number for all`, len(hs), n)
	}
	var b strings.Builder
	for i, h := range hs {
		if i > 0 {
			b.WriteByte('|')
		}
		if h != nil {
			b.WriteString(h.String())
		}
	}
	return b.String(), nil
}

// fill sets req from a line's fields: its descriptors from entries (CSV)
// or, when j is not nil, from j (JSON lines); hits are every descriptor's
// hits_addend or, separated by "|", each descriptor's (empty: none).
func (tr *Reader) fill(req *Request, t, domain, hits, entries string, j *jsonRequest) error {
	at, err := ParseSeconds(t)
	if err != nil {
		return err
	}
	req.At, req.Domain, req.Descriptors = at, domain, req.Descriptors[:0]
	if j != nil {
		err = tr.jsonEntries(req, j)
	} else {
		err = tr.csvEntries(req, entries)
	}
	if err != nil {
		return err
	}
	if !strings.Contains(hits, "|") {
		for _, d := range req.Descriptors {
			if err := tr.setHits(d, hits); err != nil {
				return err
			}
		}
		return nil
	}
	if n := strings.Count(hits, "|") + 1; n != len(req.Descriptors) {
		return fmt.Errorf("hits %q: %d values for %d descriptors: want one per descriptor, or one for all", hits, n, len(req.Descriptors))
	}
	i := 0
	for h := range strings.SplitSeq(hits, "|") {
		if err := tr.setHits(req.Descriptors[i], h); err != nil {
			return err
		}
		i++
	}
	return nil
}

// setHits sets d's hits_addend to hits, a whole number (negative: a
// refund); "" leaves it unset.
func (tr *Reader) setHits(d *ratelimitv3.RateLimitDescriptor, hits string) error {
	if hits == "" {
		return nil
	}
	h, err := strconv.ParseInt(hits, 10, 64)
	if err != nil || h == -1<<63 {
		return fmt.Errorf("hits %q: want a whole number, negative for a refund", hits)
	}
	d.HitsAddend = tr.pool.hits(uint64(max(h, -h)))
	d.IsNegativeHits = h < 0
	return nil
}

// descriptorPool recycles one request's descriptors for the next, so that
// a trace of millions of requests allocates little more than its strings.
// The service keeps nothing of a request it has answered.
type descriptorPool struct {
	descriptors []*ratelimitv3.RateLimitDescriptor
	entries     []*ratelimitv3.RateLimitDescriptor_Entry
	hitsAddends []*wrapperspb.UInt64Value
	nd, ne, nh  int
}

func (p *descriptorPool) reset() { p.nd, p.ne, p.nh = 0, 0, 0 }

func (p *descriptorPool) descriptor() *ratelimitv3.RateLimitDescriptor {
	if p.nd == len(p.descriptors) {
		p.descriptors = append(p.descriptors, new(ratelimitv3.RateLimitDescriptor))
	}
	d := p.descriptors[p.nd]
	p.nd++
	d.Entries, d.HitsAddend, d.IsNegativeHits = d.Entries[:0], nil, false
	return d
}

func (p *descriptorPool) entry(key, value string) *ratelimitv3.RateLimitDescriptor_Entry {
	if p.ne == len(p.entries) {
		p.entries = append(p.entries, new(ratelimitv3.RateLimitDescriptor_Entry))
	}
	e := p.entries[p.ne]
	p.ne++
	e.Key, e.Value = key, value
	return e
}

func (p *descriptorPool) hits(n uint64) *wrapperspb.UInt64Value {
	if p.nh == len(p.hitsAddends) {
		p.hitsAddends = append(p.hitsAddends, new(wrapperspb.UInt64Value))
	}
	h := p.hitsAddends[p.nh]
	p.nh++
	h.Value = n
	return h
}

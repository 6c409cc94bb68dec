package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Recorder is a slog.Handler that keeps every record at Level or above
// (the zero Level is Info, what a default handler prints).
type Recorder struct {
	Level slog.Level

	mu   sync.Mutex
	recs []Record
}

// Record is one record kept: its level, message and attributes, each
// value as its String.
type Record struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// Logger is a logger that writes to r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Messages are the messages recorded so far, oldest first.
func (r *Recorder) Messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	msgs := make([]string, len(r.recs))
	for i := range r.recs {
		msgs[i] = r.recs[i].Message
	}
	return msgs
}

// Records are the records kept so far, oldest first.
func (r *Recorder) Records() []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.recs)
}

func (r *Recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= r.Level }
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler           { return r }
func (r *Recorder) WithGroup(string) slog.Handler                { return r }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := make(map[string]string, rec.NumAttrs())
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, Record{Level: rec.Level, Message: rec.Message, Attrs: attrs})
	return nil
}

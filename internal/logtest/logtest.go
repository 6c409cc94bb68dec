package logtest

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Recorder is a slog.Handler that keeps the message of every record at
// Info or above, what a default handler prints.
type Recorder struct {
	mu   sync.Mutex
	msgs []string
}

// Logger is a logger that writes to r.
func (r *Recorder) Logger() *slog.Logger { return slog.New(r) }

// Messages are the messages recorded so far, oldest first.
func (r *Recorder) Messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.msgs)
}

func (r *Recorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (r *Recorder) WithAttrs([]slog.Attr) slog.Handler           { return r }
func (r *Recorder) WithGroup(string) slog.Handler                { return r }

func (r *Recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}

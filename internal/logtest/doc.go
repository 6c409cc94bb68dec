// Package logtest records what a *slog.Logger logs, for tests that check
// which lines a component writes.
//
// A Recorder is safe for concurrent use.
package logtest

// Package watch keeps a compiled policy in step with its file.
//
// A Watcher loads the policy file once (New), then watches the file's
// directory with fsnotify so that it sees every way the file can change:
// written in place, replaced by an editor's rename, deleted and recreated,
// or — in Kubernetes — swapped by the kubelet, which replaces the mounted
// directory's "..data" symlink atomically while "policy.yaml" stays a
// symlink into it. Events are debounced; the file is re-read and
// recompiled only when its SHA-256 differs from the last content tried. A
// slow poll catches changes no event reports (a symlink into another
// directory).
//
// The path may also be a directory of policy files (policy.ReadFiles):
// the directory itself is watched, and an event on any of its *.yaml files
// or its "..data" reloads the whole set; a set with one bad file is
// refused whole.
//
// Reload re-reads the file on request (tokengate calls it on SIGHUP), for
// when events are missed or turned off.
//
// A file that cannot be read, parsed or validated is refused whole: the
// last good policy keeps serving, the failure is logged with every issue,
// and the OnReload hook hears of it (so that the server can count
// tokengate_policy_reloads_total{result} and, by FailureReason,
// tokengate_policy_reload_failures_total{reason}). Only a regular file is
// read (a symlink to one is followed): a named pipe, directory or device
// at the path is refused before a byte is read, never waited on,
// at the first load as on a reload. A good file is compiled against
// the serving policy (policy.Compiler), swapped in atomically and
// activated, so a request sees exactly one policy: whatever Current
// returned when it started.
//
// That transition is a Publisher's (publish.go), which every source of
// policies uses: the Watcher for files, pkg/policy/xds for a management
// server, so both compile, version, activate, log and count alike.
//
// An Optional watcher (the candidate policy) starts whatever the file
// holds, and its file's removal unloads the policy: Current is nil until
// the file is back.
//
// Current is safe for concurrent use and never blocks; reloads run one at
// a time.
package watch

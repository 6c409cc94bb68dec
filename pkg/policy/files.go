package policy

// A policy is one file or a set of them (a directory). Each file is read
// in its own format, recognised by its top-level key: `domains:` is
// tokengate's, `domain:` is envoyproxy/ratelimit's (one domain a file).
// A set may hold any number of reference files and at most one native
// file (it alone carries revision, request_id_key and front_doors); a
// domain defined twice is an error naming both files.

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"go.yaml.in/yaml/v3"
)

// File is one policy file: its name (in messages) and its bytes.
type File struct {
	Name string
	Data []byte
}

// ErrNotRegular is the error, wrapped in an *fs.PathError, of a policy
// path that is not a regular file once symlinks are followed: a named
// pipe, a socket or a device (or, for a file of a set, a directory).
var ErrNotRegular = errors.New("not a regular file")

// IsReference reports whether a file's bytes are in envoyproxy/ratelimit's
// format: a mapping with a top-level domain (or descriptors) key and no
// domains key.
func IsReference(data []byte) bool {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return false
	}
	return isReferenceRoot(doc.Content[0])
}

func isReferenceRoot(root *yaml.Node) bool {
	return root.Kind == yaml.MappingNode && lookup(root, "domains") == nil &&
		(lookup(root, "domain") != nil || lookup(root, "descriptors") != nil)
}

// FilesSHA256 identifies what a policy is compiled from: the SHA-256 of
// the file's bytes for a single file, else of every file's base name and
// SHA-256, in order. Policy.SHA256 returns it.
//
// It identifies the content, not how it was read: one file given as
// itself or as the only file of a directory (a ConfigMap mounted whole or
// by subPath) is the same policy, and its sum is what sha256sum prints for
// the file. In a set, the names are part of it, as they order the files.
func FilesSHA256(name string, files []File) [32]byte {
	if len(files) == 1 {
		return sha256.Sum256(files[0].Data)
	}
	h := sha256.New()
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "%s\x00%x\n", filepath.Base(f.Name), sum)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// parseFiles reads and validates a set of policy files into one Policy
// whose rules have no Version yet, the rules of reference files charged
// as ref says (Compiler.ReferenceCharge). It reports every issue of every
// file, sorted by file and line.
func parseFiles(name string, files []File, ref Charge) (*Policy, error) {
	p := &Policy{name: name, sum: FilesSHA256(name, files), domains: make(map[string]*domain)}
	var errs Errors
	var warnings []*Issue
	where := make(map[string]string) // domain -> file:line
	native := ""
	if len(files) == 0 {
		errs = append(errs, &Issue{File: name, Err: errors.New("no *.yaml policy files")})
	}
	for _, f := range files {
		r := &reader{file: f.Name, refCharge: ref}
		add := func(dname string, line int, d *domain) {
			if first, ok := where[dname]; ok {
				r.fail(&yaml.Node{Line: line}, at{domain: dname}, "", fmt.Errorf("repeated domain: also in %s", first))
				return
			}
			where[dname] = fmt.Sprintf("%s:%d", f.Name, line)
			p.domains[dname] = d
			p.names = append(p.names, dname)
		}
		root := r.document(f.Data)
		switch {
		case root == nil:
		case isReferenceRoot(root):
			rf := r.compatParse(root)
			if rf != nil && len(r.errs) == 0 {
				d := r.compatRules(rf)
				if rf.domain != "" {
					add(rf.domain, rf.domainLine, d)
				}
			}
		case native != "":
			r.fail(root, at{}, "", fmt.Errorf("a second native policy file (the first is %s): a set holds at most one", native))
		default:
			native = f.Name
			np := &Policy{domains: make(map[string]*domain)}
			r.policy(root, np)
			p.revision, p.requestIDKey, p.frontDoors = np.revision, np.requestIDKey, np.frontDoors
			for _, dn := range np.names {
				add(dn, np.domains[dn].line, np.domains[dn])
			}
		}
		errs = append(errs, r.errs...)
		warnings = append(warnings, r.warnings...)
	}
	if len(errs) > 0 {
		slices.SortStableFunc(errs, byPlace)
		return nil, errs
	}
	slices.Sort(p.names)
	slices.SortStableFunc(warnings, byPlace)
	p.warnings = warnings
	return p, nil
}

func byPlace(a, b *Issue) int {
	if c := strings.Compare(a.File, b.File); c != 0 {
		return c
	}
	return a.Line - b.Line
}

// ReadFiles reads the policy at path: a file, or a directory whose *.yaml
// files (not those whose names start with ".", such as a Kubernetes
// volume's ..data) are read in name order. Symlinks are followed; a path
// or a file of the directory that is not a regular file is refused with
// ErrNotRegular before a byte is read.
func ReadFiles(path string) ([]File, error) {
	data, isDir, err := readRegular(path, true)
	if err != nil {
		return nil, err
	}
	if !isDir {
		return []File{{Name: path, Data: data}}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var files []File
	for _, e := range entries {
		if !InSet(e.Name()) {
			continue
		}
		name := filepath.Join(path, e.Name())
		data, _, err := readRegular(name, false)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Name: name, Data: data})
	}
	return files, nil
}

// InSet reports whether a directory entry of this base name is a policy
// file of the directory's set.
func InSet(base string) bool {
	return strings.HasSuffix(base, ".yaml") && !strings.HasPrefix(base, ".")
}

// readRegular reads a regular file (a symlink is followed), or with
// dirOK reports that path is a directory; it reads at most one byte more
// than MaxFileSize, enough for the reader to refuse a file that
// is too large without reading all of it. Anything else is refused with
// ErrNotRegular before a byte is read: reading a named pipe blocks until
// someone writes to it, and a device never ends. The file is opened
// non-blocking (which a regular file ignores) and checked through the open
// descriptor, so a pipe put there between a check and the open cannot
// block either.
func readRegular(path string, dirOK bool) (data []byte, isDir bool, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return nil, false, err
	case dirOK && fi.IsDir():
		return nil, true, nil
	case !fi.Mode().IsRegular():
		return nil, false, &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, fileKind(fi.Mode()))}
	}
	data, err = io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	return data, false, err
}

// fileKind names what a non-regular file is, for the refusal.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	default:
		return "mode " + m.Type().String()
	}
}

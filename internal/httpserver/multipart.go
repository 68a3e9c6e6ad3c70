package httpserver

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// defaultMaxParts bounds the parts of one multipart body when no max_input_vars is given.
const defaultMaxParts = 1000

func isMultipart(contentType string) bool {
	if len(contentType) < len("multipart/form-data") {
		return false
	}
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "multipart/form-data"
}

// upload is a parsed multipart body: fields url-encoded, files on disk until cleanup.
type upload struct {
	form  string
	files []protocol.File
	size  int64 // bytes of fields and files received
}

// cleanup removes the temporary files; safe on nil.
func (u *upload) cleanup() {
	if u == nil {
		return
	}
	for _, f := range u.files {
		if f.TempPath != "" {
			_ = os.Remove(f.TempPath)
		}
	}
}

// uploadNoFile is PHP's UPLOAD_ERR_NO_FILE.
const uploadNoFile = 4

// parseMultipart streams a multipart/form-data body: fields become a url-encoded string with
// literal brackets (for PHP's parse_str), files go to temporary files. It returns the upload
// even on error, so the caller can clean up, and the status to answer with. A body of more than
// maxParts parts (http.max_input_vars; 0 means 1000) is refused with 413.
func parseMultipart(r *http.Request, limit int64, maxParts int, dir string) (*upload, int, error) {
	u := &upload{}
	if maxParts <= 0 {
		maxParts = defaultMaxParts
	}
	if limit > 0 {
		r.Body = http.MaxBytesReader(nil, r.Body, limit)
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return u, http.StatusBadRequest, fmt.Errorf("malformed multipart body: %w", err)
	}
	var form strings.Builder
	for parts := 0; ; parts++ {
		part, err := mr.NextRawPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u, bodyErrorStatus(err), fmt.Errorf("malformed multipart body: %w", err)
		}
		if parts == maxParts {
			return u, http.StatusRequestEntityTooLarge, fmt.Errorf("more than %d parts in the multipart body", maxParts)
		}
		name, fileName, isFile := contentDisposition(part.Header.Get("Content-Disposition"))
		if name == "" {
			continue // PHP ignores parts without a name too
		}
		if strings.IndexByte(name, 0) >= 0 {
			return u, http.StatusBadRequest, errors.New("a multipart field name contains a NUL byte")
		}
		if !isFile {
			value, err := io.ReadAll(part)
			if err != nil {
				return u, bodyErrorStatus(err), fmt.Errorf("reading multipart field %q: %w", name, err)
			}
			u.size += int64(len(value))
			if form.Len() > 0 {
				form.WriteByte('&')
			}
			form.WriteString(escapeFieldName(name))
			form.WriteByte('=')
			form.WriteString(url.QueryEscape(string(value)))
			continue
		}
		fileName = baseName(strings.ReplaceAll(fileName, "\x00", ""))
		ctype := strings.ReplaceAll(part.Header.Get("Content-Type"), "\x00", "")
		f := protocol.File{Field: name, Name: fileName, Type: ctype}
		if fileName == "" {
			// An empty file input: PHP reports UPLOAD_ERR_NO_FILE and no temporary file.
			_, _ = io.Copy(io.Discard, part)
			f.Error = uploadNoFile
			u.files = append(u.files, f)
			continue
		}
		tmp, err := os.CreateTemp(dir, "peregrine-upload-*")
		if err != nil {
			return u, http.StatusInternalServerError, fmt.Errorf("creating a temporary file for an upload: %w", err)
		}
		f.TempPath = tmp.Name()
		u.files = append(u.files, f) // registered before writing, so cleanup finds it
		n, err := io.Copy(tmp, part)
		closeErr := tmp.Close()
		if err != nil {
			return u, bodyErrorStatus(err), fmt.Errorf("receiving upload %q: %w", fileName, err)
		}
		if closeErr != nil {
			return u, http.StatusInternalServerError, fmt.Errorf("writing upload %q: %w", fileName, closeErr)
		}
		u.files[len(u.files)-1].Size = n
		u.size += n
	}
	u.form = form.String()
	return u, 0, nil
}

// contentDisposition reads a part's Content-Disposition the way PHP's rfc1867.c does, not the
// way mime.ParseMediaType does: only the parameters name and filename count (the last of each
// wins, names compared case-insensitively), values may be quoted with " or ' and escape that
// quote or a backslash with a backslash, and RFC 5987's name*= and filename*= are ignored, as
// PHP ignores them. Honouring them would let filename="safe.jpg"; filename*=UTF-8”evil.php
// reach PHP as evil.php, past whatever checked the plain filename. isFile reports a filename
// parameter, even an empty one: that is what makes a part a file input for PHP.
func contentDisposition(v string) (name, filename string, isFile bool) {
	for v != "" {
		var pair string
		pair, v = cutWord(v, ';')
		v = strings.TrimLeft(v, " \t\r\n")
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			continue
		}
		switch strings.ToLower(strings.TrimSpace(key)) {
		case "name":
			name = confValue(value)
		case "filename":
			filename, isFile = confValue(value), true
		}
	}
	return name, filename, isFile
}

// cutWord returns s up to the first stop outside quotes, and the rest after it (PHP's
// php_ap_getword).
func cutWord(s string, stop byte) (word, rest string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case stop:
			return s[:i], s[i+1:]
		case '"', '\'':
			for i++; i < len(s) && s[i] != c; i++ {
				if s[i] == '\\' && i+1 < len(s) && s[i+1] == c {
					i++
				}
			}
		}
	}
	return s, ""
}

// confValue unquotes a parameter value (PHP's php_ap_getword_conf): a quoted value ends at the
// first unescaped quote, an unquoted one at the first space.
func confValue(s string) string {
	s = strings.TrimLeft(s, " \t\r\n")
	var quote byte
	if s != "" && (s[0] == '"' || s[0] == '\'') {
		quote, s = s[0], s[1:]
	} else if i := strings.IndexAny(s, " \t\r\n\v\f"); i >= 0 {
		s = s[:i]
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if quote != 0 && c == quote {
			break
		}
		if c == '\\' && i+1 < len(s) && (s[i+1] == '\\' || (quote != 0 && s[i+1] == quote)) {
			i++
			c = s[i]
		}
		b.WriteByte(c)
	}
	return b.String()
}

// escapeFieldName url-encodes a field name but keeps brackets literal, so that parse_str turns
// "a[b][]" into nested arrays as PHP does for its own multipart parsing.
func escapeFieldName(name string) string {
	s := url.QueryEscape(name)
	if strings.Contains(s, "%5") {
		s = strings.NewReplacer("%5B", "[", "%5D", "]").Replace(s)
	}
	return s
}

func bodyErrorStatus(err error) int {
	if bodyTimedOut(err) {
		return http.StatusRequestTimeout
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

// baseName drops any directory part of a client's file name, as PHP does.
func baseName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		return name[i+1:]
	}
	return name
}

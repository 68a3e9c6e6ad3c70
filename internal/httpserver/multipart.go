package httpserver

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/peregrinephp/peregrine/internal/protocol"
)

// maxParts bounds the parts of one multipart body, like PHP's max_input_vars.
const maxParts = 1000

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
// even on error, so the caller can clean up, and the status to answer with.
func parseMultipart(r *http.Request, limit int64, dir string) (*upload, int, error) {
	u := &upload{}
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
		name := part.FormName()
		if name == "" {
			continue // PHP ignores parts without a name too
		}
		if strings.IndexByte(name, 0) >= 0 {
			return u, http.StatusBadRequest, errors.New("a multipart field name contains a NUL byte")
		}
		if !isFilePart(part) {
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
		_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
		fileName := baseName(strings.ReplaceAll(params["filename"], "\x00", ""))
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

// isFilePart reports whether a part's Content-Disposition has a filename parameter, even an
// empty one: that is what makes it a file input for PHP.
func isFilePart(part *multipart.Part) bool {
	_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
	if err != nil {
		return false
	}
	_, ok := params["filename"]
	return ok
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

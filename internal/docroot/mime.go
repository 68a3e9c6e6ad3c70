package docroot

import (
	"path"
	"strings"
)

// defaultType is the Content-Type of a file whose extension the table does not know, nginx's
// default_type.
const defaultType = "application/octet-stream"

// types maps lower-case file extensions to media types. It is built in, so that the answer does
// not change with the machine's /etc/mime.types; the values follow nginx's mime.types, with
// text/javascript (RFC 9239) for scripts and the types nginx lacks for fonts, modules, source maps
// and newer images. Text types carry no charset, as with nginx.
var types = map[string]string{
	// text
	".html": "text/html", ".htm": "text/html", ".shtml": "text/html", ".xhtml": "application/xhtml+xml",
	".css": "text/css", ".js": "text/javascript", ".mjs": "text/javascript", ".cjs": "text/javascript",
	".txt": "text/plain", ".md": "text/markdown", ".csv": "text/csv", ".tsv": "text/tab-separated-values",
	".xml": "text/xml", ".xsl": "text/xml", ".xslt": "text/xml", ".rss": "application/rss+xml",
	".atom": "application/atom+xml", ".json": "application/json", ".map": "application/json",
	".jsonld": "application/ld+json", ".webmanifest": "application/manifest+json",
	".ics": "text/calendar", ".vtt": "text/vtt", ".yaml": "application/yaml", ".yml": "application/yaml",
	".wasm": "application/wasm",
	// images
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
	".webp": "image/webp", ".avif": "image/avif", ".svg": "image/svg+xml",
	".ico": "image/x-icon", ".bmp": "image/bmp", ".tif": "image/tiff", ".tiff": "image/tiff",
	".jxl": "image/jxl", ".heic": "image/heic",
	// fonts
	".woff": "font/woff", ".woff2": "font/woff2", ".ttf": "font/ttf", ".otf": "font/otf",
	".eot": "application/vnd.ms-fontobject",
	// audio and video
	".mp3": "audio/mpeg", ".ogg": "audio/ogg", ".oga": "audio/ogg", ".m4a": "audio/mp4",
	".wav": "audio/wav", ".flac": "audio/flac", ".opus": "audio/ogg", ".aac": "audio/aac",
	".mp4": "video/mp4", ".m4v": "video/mp4", ".webm": "video/webm", ".ogv": "video/ogg",
	".mov": "video/quicktime", ".avi": "video/x-msvideo", ".mpeg": "video/mpeg", ".mpg": "video/mpeg",
	".ts": "video/mp2t", ".m3u8": "application/vnd.apple.mpegurl",
	// documents and archives
	".pdf": "application/pdf", ".rtf": "application/rtf", ".doc": "application/msword",
	".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
	".xls":  "application/vnd.ms-excel",
	".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
	".ppt":  "application/vnd.ms-powerpoint",
	".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
	".odt":  "application/vnd.oasis.opendocument.text", ".epub": "application/epub+zip",
	".zip": "application/zip", ".gz": "application/gzip", ".tgz": "application/gzip",
	".bz2": "application/x-bzip2", ".xz": "application/x-xz", ".zst": "application/zstd",
	".br": "application/octet-stream", ".7z": "application/x-7z-compressed", ".tar": "application/x-tar",
	".rar": "application/vnd.rar", ".jar": "application/java-archive",
	".swf": "application/x-shockwave-flash", ".bin": "application/octet-stream",
	".exe": "application/octet-stream", ".dmg": "application/octet-stream",
	".iso": "application/octet-stream", ".deb": "application/vnd.debian.binary-package",
	".crt": "application/x-x509-ca-cert", ".pem": "application/x-x509-ca-cert",
}

// contentType returns the media type of a file by its name's extension.
func contentType(name string) string {
	ext := path.Ext(name)
	if t, ok := types[ext]; ok {
		return t
	}
	if t, ok := types[strings.ToLower(ext)]; ok {
		return t
	}
	return defaultType
}

package docroot

// Param is one CGI parameter, a name and its value.
type Param struct {
	Name, Value string
}

// Params returns the CGI parameters for t that nginx, with Debian's fastcgi.conf and
// snippets/fastcgi-php.conf, sends PHP-FPM and that the REQUEST frame's own fields do not carry:
// its server parameters. serverName is SERVER_NAME, nginx's server_name: the handler passes
// http.server_name, or the address the connection arrived on when that is empty.
//
// For a Script target, "/a.php/extra?z=1" under /srv/www, it gives, in this order:
//
//	SCRIPT_FILENAME  /srv/www/a.php
//	SCRIPT_NAME      /a.php
//	PATH_INFO        /extra   (always given, empty without extra path, as Debian's snippet does)
//	DOCUMENT_ROOT    /srv/www
//	DOCUMENT_URI     /a.php   (nginx's $document_uri once try_files has run: the script)
//	SERVER_NAME      example.com
//	REDIRECT_STATUS  200
//
// DOCUMENT_URI is the script's name, not the whole path "/a.php/extra": Debian's snippet runs
// try_files $fastcgi_script_name =404, which sets $uri to the script it found (checked against
// nginx by integration TestDocumentURIAsNginx). A location without that try_files would pass
// the whole path; PHP_SELF carries it under both.
//
// What the runtimes derive from the frame's fields, as PHP-FPM and nginx do, is left out:
// REQUEST_METHOD, REQUEST_URI, QUERY_STRING, SERVER_PROTOCOL, REQUEST_SCHEME, HTTPS (on over
// TLS), REMOTE_ADDR and _PORT, SERVER_ADDR and _PORT, CONTENT_TYPE, CONTENT_LENGTH,
// GATEWAY_INTERFACE, SERVER_SOFTWARE and the HTTP_* headers; and PHP_SELF, which PHP-FPM
// builds itself from SCRIPT_NAME and PATH_INFO ("/a.php/extra"), and so does the native runtime.
// PHP-FPM behind nginx sets no PATH_TRANSLATED.
//
// A Worker target, whose script is the worker's own, gives DOCUMENT_ROOT and SERVER_NAME only.
// Other kinds give none.
func (r *Root) Params(t Target, serverName string) []Param {
	switch t.Kind {
	case Script:
		return []Param{
			{"SCRIPT_FILENAME", t.File},
			{"SCRIPT_NAME", t.ScriptName},
			{"PATH_INFO", t.PathInfo},
			{"DOCUMENT_ROOT", r.dir},
			{"DOCUMENT_URI", t.URI},
			{"SERVER_NAME", serverName},
			{"REDIRECT_STATUS", "200"},
		}
	case Worker:
		return []Param{
			{"DOCUMENT_ROOT", r.dir},
			{"SERVER_NAME", serverName},
		}
	}
	return nil
}

<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * Sessions gives PHP's session extension the request boundaries it never sees in a worker.
 *
 * Under PHP-FPM the session module forgets the session id at the end of every request and reads
 * the next one from $_COOKIE at session_start(). A worker process never ends its request, so
 * without this class the id of the first user stays set: the next client's session_start()
 * reopens that user's session whatever cookie it sent, or none. And under the CLI SAPI the
 * session cookie PHP sets is dropped, so a new session never reaches the browser.
 *
 * begin() and end() bracket each request:
 *
 *     begin($cookies) --> app code: session_start(), $_SESSION ... --> end(): headers to send
 *                                                                       session written, closed
 *                                                                       and forgotten; $_SESSION unset
 *
 * end() returns the Set-Cookie header of a session the client does not know yet (new, or
 * regenerated) and the cache headers of session.cache_limiter, which PHP would have sent.
 *
 * PHP refuses session_start() and session_id() once anything was written to the real STDOUT
 * ("headers already sent"), which in a worker is for the rest of its life: a worker that uses
 * sessions must not echo outside a request. Then there is no session to bleed either.
 *
 * @internal
 */
final class Sessions
{
    /** @var array<string, mixed> the request's cookies, as $_COOKIE had them before the code ran */
    private static array $cookies = [];

    /**
     * Starts a request: forgets a session id left over from the worker's bootstrap, so that
     * session_start() reads the id from $_COOKIE as PHP does on the first request.
     *
     * @param array<string, mixed> $cookies the request's cookies ($_COOKIE)
     */
    public static function begin(array $cookies): void
    {
        self::$cookies = $cookies;
        if (self::enabled() && session_status() === PHP_SESSION_ACTIVE) {
            session_write_close();
        }
        if (self::enabled() && session_id() !== '') {
            self::forget();
        }
        unset($_SESSION);
    }

    /**
     * Ends a request: writes and closes a session left open, forgets its id and unsets
     * $_SESSION. Returns the headers PHP would have sent for it, as [name, value] pairs.
     *
     * @return list<array{string, string}>
     */
    public static function end(): array
    {
        $cookies = self::$cookies;
        self::$cookies = [];
        if (!self::enabled()) {
            return [];
        }
        $headers = [];
        try {
            if (session_status() === PHP_SESSION_ACTIVE) {
                session_write_close();
            }
        } finally {
            $id = session_id();
            if (\is_string($id) && $id !== '') {
                $headers = self::headers($id, $cookies);
                self::forget();
            }
            unset($_SESSION);
        }

        return $headers;
    }

    /** Whether the session extension is loaded and not disabled. */
    private static function enabled(): bool
    {
        return \function_exists('session_status') && session_status() !== PHP_SESSION_DISABLED;
    }

    /**
     * The headers of a session that ran in this request: its cookie if the client did not send
     * this id, and the cache limiter's.
     *
     * @param array<string, mixed> $cookies
     *
     * @return list<array{string, string}>
     */
    private static function headers(string $id, array $cookies): array
    {
        $headers = [];
        $name = (string) session_name();
        if (filter_var(ini_get('session.use_cookies'), FILTER_VALIDATE_BOOL) && ($cookies[$name] ?? null) !== $id) {
            $headers[] = ['Set-Cookie', self::cookie($name, $id)];
        }
        foreach (self::cacheLimiter() as $header) {
            $headers[] = $header;
        }

        return $headers;
    }

    /** The session cookie exactly as PHP's php_session_send_cookie() writes it. */
    private static function cookie(string $name, string $id): string
    {
        $p = session_get_cookie_params();
        $cookie = urlencode($name) . '=' . urlencode($id);
        if ($p['lifetime'] > 0) {
            $cookie .= '; expires=' . gmdate('D, d M Y H:i:s \G\M\T', time() + $p['lifetime'])
                . '; Max-Age=' . $p['lifetime'];
        }
        if ($p['path'] !== '') {
            $cookie .= '; path=' . $p['path'];
        }
        if ($p['domain'] !== '') {
            $cookie .= '; domain=' . $p['domain'];
        }
        if ($p['secure']) {
            $cookie .= '; secure';
        }
        if ($p['httponly']) {
            $cookie .= '; HttpOnly';
        }
        if (($p['samesite'] ?? '') !== '') {
            $cookie .= '; SameSite=' . $p['samesite'];
        }

        return $cookie;
    }

    /**
     * The headers of session.cache_limiter, as PHP's php_session_cache_limiter() sends them
     * (without Last-Modified, which PHP takes from the script file).
     *
     * @return list<array{string, string}>
     */
    private static function cacheLimiter(): array
    {
        $expire = 60 * (int) session_cache_expire();
        $past = 'Thu, 19 Nov 1981 08:52:00 GMT';

        return match (session_cache_limiter()) {
            'nocache' => [['Expires', $past], ['Cache-Control', 'no-store, no-cache, must-revalidate'], ['Pragma', 'no-cache']],
            'private' => [['Expires', $past], ['Cache-Control', 'private, max-age=' . $expire]],
            'private_no_expire' => [['Cache-Control', 'private, max-age=' . $expire]],
            'public' => [['Expires', gmdate('D, d M Y H:i:s \G\M\T', time() + $expire)], ['Cache-Control', 'public, max-age=' . $expire]],
            default => [],
        };
    }

    /**
     * Makes the session module forget the current id, as the end of a request does: the next
     * session_start() then reads the id from $_COOKIE again (session_id('') would not: PHP looks
     * at the cookie only while it has no id at all).
     *
     * The only way PHP offers is session_destroy(), which resets the module's request state; it
     * is called on a session opened for a random id, so no user's data is touched. The save
     * handler sees one open, read, destroy and close for that id.
     */
    private static function forget(): void
    {
        if (headers_sent()) {
            return; // PHP refuses every call below; session_start() is refused too, so nothing bleeds
        }
        $level = error_reporting(error_reporting() & ~(E_WARNING | E_NOTICE));
        try {
            if (session_id(bin2hex(random_bytes(16))) !== false && @session_start()) {
                session_destroy();
            }
        } catch (\Throwable) {
            // A user save handler that throws: the id below is still cleared.
        } finally {
            error_reporting($level);
        }
        if (session_status() === PHP_SESSION_ACTIVE) {
            session_abort();
        }
        if (session_id() !== '') {
            session_id('');
        }
    }
}

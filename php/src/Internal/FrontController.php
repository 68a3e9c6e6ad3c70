<?php

declare(strict_types=1);

namespace Peregrine\Internal;

/**
 * FrontController gives a framework's worker the server variables PHP-FPM gives its front
 * controller. Behind nginx's `try_files $uri $uri/ /index.php?$query_string` (and Debian's
 * fastcgi-php.conf, which splits `/index.php/rest` into the script and PATH_INFO), every request
 * that names no file runs public/index.php with SCRIPT_FILENAME, SCRIPT_NAME, DOCUMENT_URI,
 * PATH_INFO and PHP_SELF describing it; frameworks compute their base URL and path from them
 * (Symfony's Request::getBaseUrl(), which Laravel uses too). A worker serves those requests
 * without running the file, so it fills them in itself, unless the server did.
 *
 * @internal
 */
final class FrontController
{
    /** Sets the front controller's variables in $_SERVER for the current request. */
    public static function describe(string $publicDir, string $front = 'index.php'): void
    {
        if (($_SERVER['SCRIPT_NAME'] ?? '') !== '') {
            return;
        }
        $script = '/' . $front;
        $path = rawurldecode(explode('?', (string) ($_SERVER['REQUEST_URI'] ?? '/'), 2)[0]);
        $pathInfo = '';
        if (str_starts_with($path, $script) && ($path === $script || $path[\strlen($script)] === '/')) {
            $pathInfo = substr($path, \strlen($script));
        }
        $_SERVER['SCRIPT_FILENAME'] = rtrim($publicDir, '/') . $script;
        $_SERVER['SCRIPT_NAME'] = $script;
        $_SERVER['DOCUMENT_URI'] = $script;
        $_SERVER['PATH_INFO'] = $pathInfo;
        $_SERVER['PHP_SELF'] = $script . $pathInfo;
    }
}

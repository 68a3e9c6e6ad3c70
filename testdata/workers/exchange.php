<?php
// The exchange tests' native worker (serveGlobals, so PHP's own functions run as under FPM):
// one route per way a request can end. Under the cli runtime it refuses to start.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

if (!function_exists('peregrine_handle_request')) {
    fwrite(STDERR, "exchange.php needs the native runtime\n");
    exit(1);
}

Peregrine\Worker::create()->serveGlobals(function (): void {
    $ms = (int) ($_GET['ms'] ?? 0);
    switch (parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH)) {
        case '/pid':
            echo getmypid();
            return;
        case '/finish':
            // The answer leaves now; the work after it (Symfony's and Laravel's terminate) goes on.
            echo 'answered';
            fastcgi_finish_request();
            usleep($ms * 1000);
            return;
        case '/finish-hash':
            // The answer leaves first; the body is read after it, as Laravel's and Symfony's
            // terminate() may: its length and hash go to the file named by ?out, for the test.
            echo 'answered';
            fastcgi_finish_request();
            usleep($ms * 1000);
            $body = file_get_contents('php://input');
            file_put_contents($_GET['out'] . '.tmp', strlen($body) . ' ' . hash('sha256', $body));
            rename($_GET['out'] . '.tmp', $_GET['out']);
            return;
        case '/refuse':
            // A request refused without reading its body (a framework's 405), optionally with
            // work after the answer.
            http_response_code(405);
            echo 'refused';
            if (isset($_GET['finish'])) {
                fastcgi_finish_request();
                usleep($ms * 1000);
            }
            return;
        case '/fatal':
            // Exhausting memory_limit: a fatal error, answered 500; the worker then exits. The
            // body, if any, is never read.
            ini_set('memory_limit', '16M');
            $s = str_repeat('x', 64 << 20);
            echo strlen($s);
            return;
        case '/status':
            http_response_code((int) $_GET['code']);
            echo 'status';
            return;
        case '/sleep':
            usleep($ms * 1000);
            echo 'slept';
            return;
        case '/hang':
            while (true) {
                usleep(100000);
            }
    }
    http_response_code(404);
});

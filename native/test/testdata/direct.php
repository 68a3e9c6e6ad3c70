<?php
// A worker for direct mode's tests (direct_test.go), on peregrine_handle_request() itself.
declare(strict_types=1);

$n = 0;
while (peregrine_handle_request(function () use (&$n): void {
    $n++;
    $path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
    parse_str($_SERVER['QUERY_STRING'], $q);
    header('X-Pid: ' . getmypid());
    header('X-Count: ' . $n);
    header('X-Request-Uri: ' . $_SERVER['REQUEST_URI']);
    switch ($path) {
        case '/echo':
            header('X-Method: ' . $_SERVER['REQUEST_METHOD']);
            header('X-Uri: ' . $_SERVER['REQUEST_URI']);
            header('X-Length: ' . $_SERVER['CONTENT_LENGTH']);
            echo file_get_contents('php://input');
            return;
        case '/server':
            header('Content-Type: application/json');
            $s = $_SERVER;
            echo json_encode(['host' => $s['HTTP_HOST'] ?? null, 'remote' => $s['REMOTE_ADDR'], 'server_name' => $s['SERVER_NAME'],
                'document_root' => $s['DOCUMENT_ROOT'] ?? null, 'protocol' => $s['SERVER_PROTOCOL'], 'query' => $s['QUERY_STRING'],
                'headers' => getallheaders(), 'post' => $_POST]);
            return;
        case '/sleep':
            if (isset($q['mark'])) {
                touch($q['mark']); // the test waits for it: the request is in PHP
            }
            $t = hrtime(true);
            usleep((int) ($q['ms'] ?? 100) * 1000);
            header('X-Slept-Ms: ' . intdiv(hrtime(true) - $t, 1000000)); // a signal would cut it short
            echo 'slept';
            return;
        case '/stream':
            for ($i = 0; $i < (int) ($q['parts'] ?? 3); $i++) {
                echo "part $i\n";
                flush();
            }
            return;
        case '/big':
            echo str_repeat('x', (int) $q['n']);
            return;
        case '/status':
            http_response_code((int) $q['code']);
            echo 'status';
            return;
        case '/close':
            header('Connection: ' . ($q['v'] ?? 'close'));
            echo 'closing';
            return;
        case '/finish':
            echo 'finished';
            fastcgi_finish_request();
            usleep(1000);
            return;
        case '/throw':
            throw new RuntimeException('handler failed');
        case '/fatal':
            trigger_error('a fatal error', E_USER_ERROR);
            return;
        default:
            echo 'hello';
    }
})) {
}

<?php
// The front controller: runs for every path that names no file (try_files ... /index.php?$query_string).
declare(strict_types=1);

function declared_in_every_request(): string
{
    return 'declared';
}

final class DeclaredInEveryRequest
{
}

$route = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);
switch ($route) {
    case '/session':
        session_start();
        if (isset($_GET['user'])) {
            $_SESSION['user'] = $_GET['user'];
        }
        header('Content-Type: text/plain');
        echo 'user=' . ($_SESSION['user'] ?? '');
        break;
    case '/redirect':
        header('Location: /landed');
        exit;
    case '/cookie':
        setcookie('flavour', 'oat', ['path' => '/', 'httponly' => true]);
        setrawcookie('raw', 'a%20b');
        http_response_code(201);
        echo 'cookies set';
        break;
    case '/json':
        $data = json_decode((string) file_get_contents('php://input'), true, 512, JSON_THROW_ON_ERROR);
        header('Content-Type: application/json');
        echo json_encode(['got' => $data, 'method' => $_SERVER['REQUEST_METHOD']]);
        break;
    case '/upload':
        $f = $_FILES['doc'] ?? null;
        $ok = $f !== null && is_uploaded_file($f['tmp_name']);
        $dest = sys_get_temp_dir() . '/peregrine-it-' . bin2hex(random_bytes(4));
        $moved = $ok && move_uploaded_file($f['tmp_name'], $dest);
        $sha = $moved ? sha1_file($dest) : '';
        if ($moved) {
            unlink($dest);
        }
        header('Content-Type: application/json');
        echo json_encode(['uploaded' => $ok, 'moved' => $moved, 'name' => $f['name'] ?? null, 'size' => $f['size'] ?? null,
            'error' => $f['error'] ?? null, 'sha1' => $sha, 'title' => $_POST['title'] ?? null]);
        break;
    case '/fatal':
        undefined_function_on_purpose();
        break;
    case '/shutdown':
        register_shutdown_function(static function (): void {
            echo ' and shut down';
        });
        echo 'ran';
        break;
    case '/ini':
        $before = ini_get('precision');
        ini_set('precision', '3');
        echo $before;
        break;
    case '/globals':
        $counter = ($counter ?? 0) + 1;
        echo json_encode(['counter' => $counter, 'static' => isset($GLOBALS['left_behind']), 'fn' => declared_in_every_request()]);
        $GLOBALS['left_behind'] = true;
        break;
    case '/server':
        header('Content-Type: application/json');
        $keys = ['SCRIPT_FILENAME', 'SCRIPT_NAME', 'PHP_SELF', 'PATH_INFO', 'DOCUMENT_ROOT', 'REQUEST_URI', 'QUERY_STRING',
            'SERVER_NAME', 'REQUEST_METHOD', 'SERVER_PROTOCOL', 'REMOTE_ADDR', 'HTTP_X_TEST', 'HTTPS'];
        echo json_encode(array_intersect_key($_SERVER, array_flip($keys)) + ['sapi' => PHP_SAPI, 'proxy' => getenv('HTTP_PROXY'),
            'get' => $_GET, 'remote_env' => getenv('REMOTE_ADDR')]);
        break;
    case '/segfault':
        // A crash of the process, as an extension bug would cause: only this request is lost.
        posix_kill(getmypid(), 11); // SIGSEGV: the pcntl constants are not in PHP-FPM's executable
        sleep(5);
        break;
    default:
        http_response_code(404);
        echo 'front controller: no route ' . $route;
}

<?php
// Answers case ?case=N with peregrine_answer() (?impl=native) or with the PHP that
// NativeServer::send() was before it (?impl=php): the two must give the same answer
// (TestNativeAnswerAsPHP). The handler sets headers of its own first, as a handler may.
declare(strict_types=1);

$cases = [
    [200, ['Content-Type' => 'text/plain'], 'Hello, world!'],
    [201, ['X-A' => ['1', '2'], 'x-b' => '3'], 'lists'],
    [200, [], 'no type'],
    [200, ['Location' => '/next'], ''],
    [404, ['WWW-Authenticate' => 'Basic'], 'auth'],
    [200, ['content-type' => 'text/html; charset=iso-8859-1'], '<p>'],
    [200, ['Set-Cookie' => ['a=1', 'b=2'], 'X-Pre' => 'replaced'], ''],
    [500, ['Status' => '404'], 'status header'],
    [200, ['123' => 'digits', 'X-Empty' => '', 'X-None' => []], ''],
    [200, ['Content-Type' => 'application/json', 'X-Split' => "a\nb"], '{}'],
    [204, ['X-Pre' => ['x', 'y']], ''],
    [302, ['Location' => ['/a', '/b']], ''],
    [200, ['X-Int' => 5, 'X-Float' => [1.5, 1e100, 0.1 + 0.2], 'Content-Length' => 2], 'ok'],
];
[$status, $headers, $body] = $cases[(int) $_GET['case']];
header('X-Pre: from the handler');
header('X-A: from the handler');
setcookie('c', '3');
if ($_GET['impl'] === 'native') {
    \peregrine_answer($status, $headers, $body);

    return;
}
$typed = false;
foreach ($headers as $name => $values) {
    $replace = true;
    foreach ((array) $values as $value) {
        header($name . ': ' . $value, $replace);
        $replace = false;
    }
    $typed = $typed || strcasecmp((string) $name, 'Content-Type') === 0;
}
if (!$typed) {
    ini_set('default_mimetype', '');
}
http_response_code($status);
echo $body;

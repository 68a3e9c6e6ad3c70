<?php
// A chat room: `peregrine serve examples/chat/worker.php`, then open http://127.0.0.1:8080/ in
// two browser windows. The server holds every WebSocket; any worker handles any message, and
// `peregrine reset` (or a crashed worker) disconnects nobody. README.md says more.
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\EventStream;
use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\WebSocket;
use Peregrine\WebSocket\Connection;
use Peregrine\WebSocket\Handler;
use Peregrine\WebSocket\Refused;

final class Chat implements Handler
{
    public function onOpen(Connection $c, Request $upgrade): void
    {
        parse_str($upgrade->query, $q);
        $name = trim((string) ($q['name'] ?? ''));
        if ($name === '' || \strlen($name) > 32 || preg_match('/^[\p{L}\p{N} _.-]+$/u', $name) !== 1) {
            throw new Refused(400, 'a name is 1 to 32 letters, digits, spaces, _ . or -');
        }
        $c->attributes = ['name' => $name];   // the server keeps it: no session store needed
        $c->join('room');
        WebSocket::publish('room', self::line('*', "{$name} joined"));
    }

    public function onMessage(Connection $c, string $data, bool $binary): void
    {
        $text = trim($data);
        if ($binary || $text === '' || \strlen($text) > 2000) {
            return;
        }
        WebSocket::publish('room', self::line($c->attributes['name'], $text));
    }

    public function onClose(Connection $c, int $code, string $reason): void
    {
        if (isset($c->attributes['name'])) {
            WebSocket::publish('room', self::line('*', "{$c->attributes['name']} left"));
        }
    }

    public static function line(string $from, string $text): string
    {
        return json_encode(['from' => $from, 'text' => $text, 'pid' => getmypid()], JSON_THROW_ON_ERROR | JSON_UNESCAPED_UNICODE);
    }
}

$page = (string) file_get_contents(__DIR__ . '/index.html');

Peregrine\Worker::create()->serve(static function (Request $r) use ($page): Response {
    return match ($r->path) {
        '/' => new Response(200, ['Content-Type' => 'text/html; charset=utf-8'], $page),
        // Read-only followers (server-sent events on the same channel): curl -N localhost:8080/events
        '/events' => EventStream::subscribe(['room'], $r->headers['last-event-id'][0] ?? null),
        default => new Response(404, ['Content-Type' => 'text/plain'], "not found\n"),
    };
}, websocket: new Chat());

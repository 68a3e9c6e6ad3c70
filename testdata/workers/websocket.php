<?php
// WebSocket fixture (integration/websocket_test.go). Messages are commands:
//   echo:TEXT        sends TEXT back
//   join:CH / leave:CH
//   pub:CH:TEXT      Peregrine\WebSocket::publish(CH, TEXT)
//   sendto:ID:TEXT   Peregrine\WebSocket::send(ID, TEXT)
//   set:K=V          sets attributes[K] = V;  attrs  sends the attributes as JSON
//   pid              sends the worker's pid;  id  sends the connection's id
//   throw            throws (the server closes with 1011)
//   close:CODE       closes with CODE
//   big:N            sends N bytes
//   sleep:MS         sleeps, then sends "slept"
//   exit             exit(1): under concurrency, the worker ends with the events it runs
// onOpen refuses ?refuse=STATUS, throws on ?throw, sleeps ?sleep=MS and waits for the file ?hold=F; onClose appends "id code reason" to
// $_ENV WS_CLOSE_LOG when set. HTTP requests: /publish?ch=C&msg=M (or POST /publish?ch=C, the body the message) publishes, /send?id=I&msg=M
// sends, /close?id=I closes, /events?ch=A,B subscribes to event streams, anything else
// answers "http". WS_PSR=1 serves with servePsr().
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Http\Request;
use Peregrine\Http\Response;
use Peregrine\WebSocket;
use Peregrine\WebSocket\Connection;
use Peregrine\WebSocket\Handler;
use Peregrine\WebSocket\Refused;

final class Fixture implements Handler
{
    public function onOpen(Connection $c, Request $upgrade): void
    {
        parse_str($upgrade->query, $q);
        if (isset($q['refuse'])) {
            throw new Refused((int) $q['refuse'], 'refused by the fixture');
        }
        if (isset($q['throw'])) {
            throw new RuntimeException('onOpen threw');
        }
        if (isset($q['sleep'])) {
            usleep(1000 * (int) $q['sleep']);
        }
        if (isset($q['hold'])) { // the test decides when onOpen returns: once the file is there
            touch($q['hold'] . '.began');
            for ($i = 0; $i < 6000 && !file_exists($q['hold']); $i++) {
                usleep(10000);
            }
        }
        $c->attributes = ['user' => (string) ($q['user'] ?? 'anon'), 'path' => $upgrade->path, 'n' => 0];
        if (isset($q['join'])) {
            $c->join((string) $q['join']);
        }
        if (isset($q['hello'])) {
            $c->send('hello ' . $c->attributes['user']);
        }
    }

    public function onMessage(Connection $c, string $data, bool $binary): void
    {
        $c->attributes['n'] = ($c->attributes['n'] ?? 0) + 1;
        [$cmd, $arg] = explode(':', $data, 2) + [1 => ''];
        switch ($cmd) {
            case 'echo':
                $c->send($arg, $binary);
                break;
            case 'join':
                $c->join($arg);
                $c->send('joined ' . $arg);
                break;
            case 'leave':
                $c->leave($arg);
                $c->send('left ' . $arg);
                break;
            case 'pub':
                [$ch, $text] = explode(':', $arg, 2);
                WebSocket::publish($ch, $text);
                break;
            case 'sendto':
                [$id, $text] = explode(':', $arg, 2);
                WebSocket::send($id, $text);
                break;
            case 'set':
                [$k, $v] = explode('=', $arg, 2);
                $c->attributes[$k] = $v;
                break;
            case 'attrs':
                $c->send(json_encode($c->attributes, JSON_THROW_ON_ERROR));
                break;
            case 'pid':
                $c->send((string) getmypid());
                break;
            case 'id':
                $c->send($c->id);
                break;
            case 'throw':
                $c->send('never sent');
                throw new RuntimeException('onMessage threw');
            case 'close':
                $c->close((int) $arg, 'bye');
                break;
            case 'big':
                $c->send(str_repeat('b', (int) $arg));
                break;
            case 'sleep':
                usleep(1000 * (int) $arg);
                $c->send('slept');
                break;
            case 'exit':
                exit(1);
            default:
                $c->send('unknown ' . $data);
        }
    }

    public function onClose(Connection $c, int $code, string $reason): void
    {
        $log = getenv('WS_CLOSE_LOG');
        if (is_string($log) && $log !== '') {
            file_put_contents($log, "{$c->id} {$code} {$reason} " . json_encode($c->attributes) . "\n", FILE_APPEND | LOCK_EX);
        }
    }
}

$handler = static function (Request $r): Response {
    parse_str($r->query, $q);
    switch ($r->path) {
        case '/publish':
            // A message too long for a request line (8 KiB) comes as a POST body.
            WebSocket::publish((string) $q['ch'], $r->method === 'POST' ? $r->body : (string) $q['msg']);

            return new Response(200, [], 'published');
        case '/send':
            WebSocket::send((string) $q['id'], (string) $q['msg']);

            return new Response(200, [], 'sent');
        case '/events':
            return Peregrine\Http\EventStream::subscribe(explode(',', (string) $q['ch']), $r->headers['last-event-id'][0] ?? null);
        case '/close':
            WebSocket::close((string) $q['id'], (int) ($q['code'] ?? 1000));

            return new Response(200, [], 'closed');
    }

    return new Response(200, [], 'http ' . $r->method);
};

if (getenv('WS_PSR') === '1') { // the same in PSR-7 mode, with Nyholm's factory
    require '/usr/share/php/Nyholm/Psr7/autoload.php';
    $factory = new Nyholm\Psr7\Factory\Psr17Factory();
    Peregrine\Worker::create()->servePsr(static function (Psr\Http\Message\ServerRequestInterface $p) use ($handler, $factory) {
        $r = $handler(new Request(method: $p->getMethod(), uri: $p->getRequestTarget(), body: (string) $p->getBody()));

        return $factory->createResponse($r->status)->withBody($factory->createStream((string) $r->body));
    }, $factory, websocket: new Fixture());
} else {
    Peregrine\Worker::create()->serve($handler, websocket: new Fixture());
}

<?php
// A worker that runs many requests at once and answers them out of order, speaking the protocol
// by hand (docs/protocol.md, "Concurrent requests") with stream_select and timers: the daemon
// side of workers.concurrency is tested against it, independently of the PHP library's loop.
//
//   /sleep?ms=N&tag=T   answers T (and the pid) after N ms
//   /stream?parts=N&ms=M&tag=T  streams N parts "T:i\n", one every M ms (FLUSH); &pad=P adds
//                       P bytes to each part
//   /spin?ms=N&tag=T    a CPU loop of N ms that holds the whole process, then answers T and
//                       the pid: a request stuck in a loop blocks every other one of its worker
//   /hang               never answers and ignores CANCEL: it "blocks the worker"
//   /exit               answers, then says DONE with LAST and exits at once (its last word names
//                       the last request it took: the ones after it go to another worker)
//   /die                says DONE with LAST for no request (a fatal error's shutdown) and exits
//   /fatal              says DONE with LAST for itself, unanswered, and exits: a fatal error in its
//                       fiber, named as the PHP library's shutdown function names it
// CANCEL ends a request at once with DONE and no answer (except /hang). A REQUEST whose id is
// not above the last one's is answered with ERROR: the server writes them in id order.
declare(strict_types=1);

if (getenv('PEREGRINE_PROTOCOL') !== '3') {
    fwrite(STDERR, "interleave.php: start it with the peregrine server\n");
    exit(1);
}
$in = fopen('php://fd/3', 'rb');
$out = fopen('php://fd/4', 'wb');
stream_set_read_buffer($in, 0);
stream_set_blocking($in, false);
$lastRead = 0;

function frame(int $type, int $flags, int $id, string $payload): string
{
    return pack('CCvVV', 3, $type, $flags, $id, strlen($payload)) . $payload;
}

function send(string $bytes): void
{
    global $out;
    if (fwrite($out, $bytes) !== strlen($bytes)) {
        exit(70);
    }
}

function response(int $id, int $status, string $body, int $flags = 0): string
{
    return frame(3, $flags, $id, pack('vV', $status, 0) . $body);
}

send(frame(1, 0, 0, PHP_VERSION));
$buffer = '';
$timers = []; // id => [due (float), what to do: callable returning bool (true: done)]
$now = static fn (): float => microtime(true);

while (true) {
    $next = null;
    foreach ($timers as [$due]) {
        $next = $next === null ? $due : min($next, $due);
    }
    $read = [$in];
    $w = $e = null;
    $wait = $next === null ? null : max(0.0, $next - $now());
    $n = @stream_select($read, $w, $e, $wait === null ? null : (int) $wait, $wait === null ? 0 : (int) (fmod($wait, 1.0) * 1e6));
    if ($n === false) {
        continue; // a signal
    }
    if ($n > 0) {
        $chunk = fread($in, 65536);
        if ($chunk === '' || $chunk === false) {
            if (feof($in)) {
                exit(0);
            }
        } else {
            $buffer .= $chunk;
        }
        while (strlen($buffer) >= 12) {
            $h = unpack('Cversion/Ctype/vflags/Vid/Vlength', $buffer);
            if (strlen($buffer) < 12 + $h['length']) {
                break;
            }
            $payload = substr($buffer, 12, $h['length']);
            $buffer = substr($buffer, 12 + $h['length']);
            $id = $h['id'];
            if ($h['type'] === 4) { // STOP
                exit(0);
            }
            if ($h['type'] === 9) { // CANCEL
                if (isset($timers[$id]) && $timers[$id][2] !== '/hang') {
                    unset($timers[$id]);
                    send(frame(8, 0, $id, ''));
                }
                continue;
            }
            if ($id <= $lastRead) {
                // The server writes requests in id order: the last word below relies on it.
                send(frame(5, 0, 0, "request $id after request $lastRead: ids out of order"));
                exit(70);
            }
            $lastRead = $id; // the last REQUEST taken, for the last word: later ones go elsewhere
            $headLength = unpack('V', $payload)[1];
            $fields = explode("\0", substr($payload, 4, $headLength));
            parse_str($fields[3], $q);
            $path = $fields[2];
            $ms = (int) ($q['ms'] ?? 0);
            $tag = (string) ($q['tag'] ?? '');
            switch ($path) {
                case '/sleep':
                    $timers[$id] = [$now() + $ms / 1000, static function () use ($id, $tag): bool {
                        send(response($id, 200, $tag . ' ' . getmypid()) . frame(8, 0, $id, ''));
                        return true;
                    }, $path, 0.0];
                    break;
                case '/stream':
                    $parts = (int) ($q['parts'] ?? 3);
                    $pad = str_repeat('p', (int) ($q['pad'] ?? 0));
                    $st = new stdClass(); // parts sent so far, per request
                    $st->sent = 0;
                    $timers[$id] = [$now() + $ms / 1000, static function () use ($id, $tag, $parts, $st, $pad): bool {
                        $more = $st->sent + 1 < $parts;
                        $flags = $more ? 3 : 0;
                        $part = "$tag:{$st->sent}\n" . $pad;
                        send($st->sent === 0 ? response($id, 200, $part, $flags) : frame(6, $flags, $id, $part));
                        if (!$more) {
                            send(frame(8, 0, $id, ''));
                        }
                        $st->sent++;
                        return !$more;
                    }, $path, $ms / 1000];
                    break;
                case '/spin':
                    for ($until = $now() + $ms / 1000; $now() < $until;) {
                    }
                    send(response($id, 200, $tag . ' ' . getmypid()) . frame(8, 0, $id, ''));
                    break;
                case '/hang':
                    $timers[$id] = [$now() + 3600, static fn (): bool => false, $path, 3600.0];
                    break;
                case '/die':
                    // A fatal error takes the process: its last word names no running request.
                    send(frame(8, 4, 0, pack('V', $lastRead)));
                    exit(255);
                case '/fatal':
                    send(frame(8, 4, $id, pack('V', $lastRead)));
                    exit(255);
                case '/exit':
                    send(response($id, 200, 'bye') . frame(8, 4, $id, pack('V', $lastRead)));
                    exit(0);
                default:
                    send(response($id, 404, 'no route') . frame(8, 0, $id, ''));
            }
        }
    }
    foreach ($timers as $id => [$due, $run, , $step]) {
        if ($due <= $now()) {
            if ($run()) {
                unset($timers[$id]);
            } else {
                $timers[$id][0] = $now() + $step;
            }
        }
    }
}

<?php

declare(strict_types=1);

namespace Peregrine\Tests\Support;

use Peregrine\Internal\Frame;
use PHPUnit\Framework\Assert;

/**
 * Frames decodes what a worker writes, as the server would: the test side of the protocol.
 */
final class Frames
{
    /**
     * Splits a byte string into frames.
     *
     * @return list<array{type: int, id: int, flags: int, payload: string}>
     */
    public static function split(string $bytes): array
    {
        $frames = [];
        $offset = 0;
        while ($offset < \strlen($bytes)) {
            Assert::assertGreaterThanOrEqual($offset + Frame::HEADER_SIZE, \strlen($bytes), 'truncated frame header');
            $h = unpack(Frame::HEADER_FORMAT, $bytes, $offset);
            Assert::assertSame(Frame::VERSION, $h['version']);
            $payload = substr($bytes, $offset + Frame::HEADER_SIZE, $h['length']);
            Assert::assertSame($h['length'], \strlen($payload), 'truncated frame payload');
            $frames[] = ['type' => $h['type'], 'id' => $h['id'], 'flags' => $h['flags'], 'payload' => $payload];
            $offset += Frame::HEADER_SIZE + $h['length'];
        }

        return $frames;
    }

    /**
     * Joins the frames of answers: each RESPONSE with the BODY frames that follow it while the
     * previous frame had FLAG_MORE, and checks that a DONE frame ends each request before the
     * next answer begins (a last DONE with FLAG_LAST may follow, as a worker says when it exits).
     *
     * @param list<array{type: int, id: int, flags: int, payload: string}> $frames
     *
     * @return list<array{id: int, status: int, headers: list<array{string, string}>, body: string}>
     */
    public static function answers(array $frames): array
    {
        $answers = [];
        $more = false;
        $ended = true;
        foreach ($frames as $frame) {
            if ($frame['type'] === Frame::HINTS) {
                Assert::assertFalse($more, 'a HINTS frame inside an answer');
                continue;
            }
            if ($frame['type'] === Frame::DONE) {
                Assert::assertFalse($more, 'a DONE frame inside an answer');
                if ($ended) { // only the exit's DONE may follow a request's DONE
                    Assert::assertSame(Frame::FLAG_LAST, $frame['flags'] & Frame::FLAG_LAST, 'a second DONE frame without FLAG_LAST');
                } else {
                    Assert::assertSame($answers[\count($answers) - 1]['id'], $frame['id'], 'DONE names its request');
                }
                $ended = true;
                continue;
            }
            if ($more) {
                Assert::assertSame(Frame::BODY, $frame['type'], 'a BODY frame after FLAG_MORE');
                Assert::assertSame($answers[\count($answers) - 1]['id'], $frame['id']);
                $answers[\count($answers) - 1]['body'] .= $frame['payload'];
            } else {
                Assert::assertSame(Frame::RESPONSE, $frame['type']);
                Assert::assertTrue($ended, 'an answer before the DONE of the request before');
                $answers[] = ['id' => $frame['id']] + self::response($frame['payload']);
                $ended = false;
            }
            $more = ($frame['flags'] & Frame::FLAG_MORE) !== 0;
        }
        Assert::assertFalse($more, 'an answer left open');
        Assert::assertTrue($ended || $answers === [], 'a request without its DONE frame');

        return $answers;
    }

    /**
     * Decodes a RESPONSE payload: u16 status | u32 head_len | head | body.
     *
     * @return array{status: int, headers: list<array{string, string}>, body: string}
     */
    public static function response(string $payload): array
    {
        Assert::assertGreaterThanOrEqual(6, \strlen($payload));
        ['status' => $status, 'length' => $length] = unpack('vstatus/Vlength', $payload);
        $head = substr($payload, 6, $length);
        Assert::assertSame($length, \strlen($head));
        $headers = [];
        if ($head !== '') {
            $fields = explode("\0", $head);
            Assert::assertSame(0, \count($fields) % 2, 'odd number of header fields');
            for ($i = 0; $i < \count($fields); $i += 2) {
                $headers[] = [$fields[$i], $fields[$i + 1]];
            }
        }

        return ['status' => $status, 'headers' => $headers, 'body' => substr($payload, 6 + $length)];
    }

    /**
     * A REQUEST frame for a GET of $uri, for tests that do not care about the details.
     *
     * @param list<array{string, string}> $headers
     */
    public static function get(int $id, string $uri, array $headers = [['host', 'localhost']]): string
    {
        return self::request($id, 'GET', $uri, $headers);
    }

    /**
     * @param list<array{string, string}>                             $headers
     * @param list<array{string, string, string, int, int, string}> $files
     */
    public static function request(int $id, string $method, string $uri, array $headers, string $body = '', string $form = '', array $files = [], string $scheme = 'http', string $protocol = 'HTTP/1.1'): string
    {
        $q = strpos($uri, '?');
        $path = $q === false ? $uri : substr($uri, 0, $q);
        $query = $q === false ? '' : substr($uri, $q + 1);

        return Frame::request($id, [$method, $uri, $path, $query, $protocol, '192.0.2.7', '40000', '127.0.0.1', '8080', $scheme, $form], $files, $headers, $body);
    }

    /** Headers as a name => list of values map, the shape of Response::$headers. */
    public static function headerMap(array $pairs): array
    {
        $map = [];
        foreach ($pairs as [$name, $value]) {
            $map[$name][] = $value;
        }

        return $map;
    }
}

<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\Request;
use Peregrine\Http\UploadedFile;
use Peregrine\Internal\Connection;
use Peregrine\Internal\Frame;
use Peregrine\Internal\RequestDecoder;
use Peregrine\Tests\Support\Frames;
use PHPUnit\Framework\TestCase;

/**
 * The golden vectors in testdata/protocol/vectors.json, shared with the Go suite: every frame is
 * decoded and re-encoded byte for byte.
 */
final class FrameTest extends TestCase
{
    private const VECTORS = __DIR__ . '/../../testdata/protocol/vectors.json';

    /** @return array<string, array{array<string, mixed>}> */
    public static function vectors(): array
    {
        $vectors = json_decode((string) file_get_contents(self::VECTORS), true, 512, JSON_THROW_ON_ERROR);
        $cases = [];
        foreach ($vectors as $vector) {
            $cases[$vector['name']] = [$vector];
        }

        return $cases;
    }

    public function testEveryFrameTypeHasAVector(): void
    {
        $types = array_map(static fn (array $case): string => $case[0]['type'], self::vectors());
        foreach (Frame::NAMES as $name) {
            $this->assertContains($name, $types);
        }
    }

    /** @dataProvider vectors */
    public function testDecodeAndReencode(array $vector): void
    {
        $bytes = hex2bin($vector['hex']);
        [$frame] = Frames::split($bytes);
        $this->assertSame(\constant(Frame::class . '::' . $vector['type']), $frame['type']);
        $this->assertSame($vector['id'], $frame['id']);

        $reencoded = match ($vector['type']) {
            'READY' => Frame::ready($this->text($vector, $frame['payload'])),
            'ERROR' => Frame::error($this->text($vector, $frame['payload'])),
            'STOP' => Frame::stop(),
            'REQUEST' => $this->request($vector, $frame['payload']),
            'RESPONSE' => $this->response($vector, $frame['payload']),
            'BODY' => Frame::body($vector['id'], $this->text($vector + ['text' => ''], $frame['payload']), $vector['flags']),
            'HINTS' => Frame::hints($vector['id'], self::headerList($vector['fields'])),
            'DONE' => Frame::done($vector['id'], ($vector['flags'] & Frame::FLAG_LAST) !== 0),
            'CANCEL' => Frame::cancel($vector['id']),
        };
        $this->assertSame($vector['flags'], $frame['flags']);
        $this->assertSame($vector['hex'], bin2hex($reencoded));
    }

    /** The worker's reader, fed every vector the server may send in one batch, then end of input. */
    public function testConnectionReadsAllServerFramesFromOneBatch(): void
    {
        $batch = '';
        $expected = [];
        foreach (self::vectors() as [$vector]) {
            if ($vector['type'] === 'REQUEST') {
                $batch .= hex2bin($vector['hex']);
                $expected[] = [$vector['id'], substr(hex2bin($vector['hex']), Frame::HEADER_SIZE)];
            }
        }
        $this->assertCount(3, $expected);
        $connection = new Connection(self::memory($batch . Frame::stop() . Frames::get(9, '/after-stop')), self::memory(''));

        foreach ($expected as [$id, $payload]) {
            $this->assertSame($payload, $connection->receive($got));
            $this->assertSame($id, $got);
        }
        $this->assertNull($connection->receive($got), 'STOP ends the conversation');
    }

    /**
     * Pairs as the name => list of values map Frame takes.
     *
     * @param list<array{string, string}> $pairs
     *
     * @return array<string, list<string>>
     */
    private static function headerList(array $pairs): array
    {
        $map = [];
        foreach ($pairs as [$name, $value]) {
            $map[$name][] = $value;
        }

        return $map;
    }

    /** @param array<string, mixed> $vector */
    private function text(array $vector, string $payload): string
    {
        $this->assertSame($vector['text'], $payload);

        return $payload;
    }

    /** @param array<string, mixed> $vector */
    private function request(array $vector, string $payload): string
    {
        $want = $vector['request'];
        $body = base64_decode($want['Body'], true);
        $request = RequestDecoder::decode($payload);

        $this->assertSame($want['Method'], $request->method);
        $this->assertSame($want['URI'], $request->uri);
        $this->assertSame($want['Path'], $request->path);
        $this->assertSame($want['Query'], $request->query);
        $this->assertSame($want['Protocol'], $request->protocol);
        $this->assertSame($want['RemoteAddr'], $request->remoteAddr);
        $this->assertSame((int) $want['RemotePort'], $request->remotePort);
        $this->assertSame($want['ServerAddr'], $request->serverAddr);
        $this->assertSame((int) $want['ServerPort'], $request->serverPort);
        $this->assertSame($want['Scheme'], $request->scheme);
        $this->assertSame($body, $request->body);
        $headers = [];
        foreach ($want['Headers'] as [$name, $value]) {
            $headers[$name][] = $value;
        }
        $this->assertSame($headers, $request->headers);
        $files = [];
        $tree = $request->files;
        array_walk_recursive($tree, static function (UploadedFile $file) use (&$files): void {
            $files[] = $file;
        });
        $this->assertCount(\count($want['Files'] ?? []), $files);
        foreach ($want['Files'] ?? [] as $i => $file) {
            $this->assertSame([$file['Name'], $file['Type'], $file['Size'], $file['Error'], $file['TempPath']],
                [$files[$i]->name, $files[$i]->type, $files[$i]->size, $files[$i]->error, $files[$i]->tmpPath]);
        }
        if ($want['Form'] !== '') {
            parse_str($want['Form'], $form);
            $this->assertSame($form, $request->parsedBody);
        }

        return Frame::request(
            $vector['id'],
            [$want['Method'], $want['URI'], $want['Path'], $want['Query'], $want['Protocol'], $want['RemoteAddr'],
                $want['RemotePort'], $want['ServerAddr'], $want['ServerPort'], $want['Scheme'], $want['Form']],
            array_map(static fn (array $f): array => [$f['Field'], $f['Name'], $f['Type'], $f['Size'], $f['Error'], $f['TempPath']], $want['Files'] ?? []),
            $want['Headers'],
            $body,
            $want['Params'] ?? [],
        );
    }

    /** @param array<string, mixed> $vector */
    private function response(array $vector, string $payload): string
    {
        $want = $vector['response'];
        $response = Frames::response($payload);
        $this->assertSame($want['status'], $response['status']);
        $this->assertSame($want['headers'], $response['headers']);
        $this->assertSame(base64_decode($want['body'], true), $response['body']);

        return Frame::response($vector['id'], $response['status'], Frames::headerMap($response['headers']), $response['body']);
    }

    /** @return resource */
    private static function memory(string $bytes)
    {
        $stream = fopen('php://memory', 'w+b');
        fwrite($stream, $bytes);
        rewind($stream);

        return $stream;
    }
}

<?php

declare(strict_types=1);

namespace Peregrine\Tests;

use Peregrine\Http\UploadedFile;
use PHPUnit\Framework\TestCase;

final class UploadedFileTest extends TestCase
{
    private string $dir;

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/peregrine-upload-test-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        array_map('unlink', glob($this->dir . '/*') ?: []);
        rmdir($this->dir);
    }

    public function testMoveTo(): void
    {
        file_put_contents("{$this->dir}/tmp", 'content');
        $file = new UploadedFile('me.txt', 'text/plain', 7, UPLOAD_ERR_OK, "{$this->dir}/tmp");

        $file->moveTo("{$this->dir}/kept.txt");

        $this->assertFileDoesNotExist("{$this->dir}/tmp");
        $this->assertSame('content', file_get_contents("{$this->dir}/kept.txt"));
    }

    public function testAFailedUploadCannotBeMoved(): void
    {
        $file = new UploadedFile('big.iso', '', 0, UPLOAD_ERR_INI_SIZE, '');

        $this->expectException(\RuntimeException::class);
        $this->expectExceptionMessage('error 1');
        $file->moveTo("{$this->dir}/kept");
    }

    public function testAMissingFileCannotBeMoved(): void
    {
        $file = new UploadedFile('gone.txt', 'text/plain', 1, UPLOAD_ERR_OK, "{$this->dir}/gone");

        $this->expectException(\RuntimeException::class);
        $file->moveTo("{$this->dir}/kept");
    }
}

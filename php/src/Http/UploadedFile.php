<?php

declare(strict_types=1);

namespace Peregrine\Http;

/**
 * UploadedFile is one file of a multipart/form-data request. The server has already streamed it
 * to $tmpPath and deletes that file once the response is written: move it to keep it.
 */
final class UploadedFile
{
    /**
     * @param string $name    file name sent by the client; never trust it as a path
     * @param string $type    media type sent by the client
     * @param int    $error   one of PHP's UPLOAD_ERR_* codes; UPLOAD_ERR_OK when the file is complete
     * @param string $tmpPath where the file is; empty when $error is not UPLOAD_ERR_OK
     */
    public function __construct(
        public readonly string $name,
        public readonly string $type,
        public readonly int $size,
        public readonly int $error,
        public readonly string $tmpPath,
    ) {
    }

    /**
     * Moves the file to $path, across file systems if need be. move_uploaded_file() cannot be
     * used: PHP does not know these files were uploaded.
     *
     * @throws \RuntimeException if the upload failed or the file cannot be moved
     */
    public function moveTo(string $path): void
    {
        if ($this->error !== UPLOAD_ERR_OK) {
            throw new \RuntimeException("Cannot move the upload \"{$this->name}\": it failed with error {$this->error}");
        }
        if (@rename($this->tmpPath, $path)) {
            return;
        }
        // rename() fails across file systems; copy, then remove the original.
        if (!@copy($this->tmpPath, $path) || !@unlink($this->tmpPath)) {
            throw new \RuntimeException("Cannot move the upload {$this->tmpPath} to $path: " . (error_get_last()['message'] ?? 'unknown error'));
        }
    }
}

<?php

declare(strict_types=1);

namespace Peregrine\Internal;

use Peregrine\Http\Request;
use Peregrine\WebSocket\Handler;
use Psr\Http\Message\ResponseFactoryInterface;
use Psr\Http\Message\ServerRequestInterface;
use Psr\Http\Message\StreamFactoryInterface;

/**
 * PsrWebSocketEvents is WebSocketEvents for servePsr(): it takes the events out of the PSR-7
 * requests and answers them with PSR-7 responses.
 *
 * @internal
 */
final class PsrWebSocketEvents
{
    /**
     * @param \Closure(ServerRequestInterface): mixed $handle
     *
     * @return \Closure(ServerRequestInterface): mixed
     *
     * @throws \InvalidArgumentException if $factory cannot make responses
     */
    public static function wrap(\Closure $handle, object $factory, Handler $websocket): \Closure
    {
        if (!$factory instanceof ResponseFactoryInterface || !$factory instanceof StreamFactoryInterface) {
            throw new \InvalidArgumentException(sprintf('servePsr() with a WebSocket handler needs a factory that is a PSR-17 response and stream factory; %s is not',
                $factory::class));
        }

        return static function (ServerRequestInterface $psr) use ($handle, $factory, $websocket): mixed {
            if ($psr->getMethod() !== 'WEBSOCKET') {
                return $handle($psr);
            }
            $body = (string) $psr->getBody();
            if (!WebSocketEvents::isEvent('WEBSOCKET', $body)) {
                return $handle($psr);
            }
            $server = $psr->getServerParams();
            $uri = $psr->getUri();
            $target = $psr->getRequestTarget();
            $request = new Request(method: 'WEBSOCKET', uri: $target, headers: array_change_key_case($psr->getHeaders(), CASE_LOWER), body: $body,
                remoteAddr: (string) ($server['REMOTE_ADDR'] ?? '127.0.0.1'), remotePort: (int) ($server['REMOTE_PORT'] ?? 0),
                serverAddr: (string) ($server['SERVER_ADDR'] ?? '127.0.0.1'), serverPort: (int) ($server['SERVER_PORT'] ?? ($uri->getPort() ?? 80)),
                scheme: $uri->getScheme() !== '' ? $uri->getScheme() : 'http', protocol: 'HTTP/' . $psr->getProtocolVersion());
            $answer = WebSocketEvents::handle($websocket, $request);
            $response = $factory->createResponse($answer->status);
            foreach ($answer->headers as $name => $value) {
                $response = $response->withHeader((string) $name, $value);
            }

            return $response->withBody($factory->createStream(\is_string($answer->body) ? $answer->body : ''));
        };
    }
}

<?php

declare(strict_types=1);

namespace App\Controller;

use Symfony\Bundle\FrameworkBundle\Controller\AbstractController;
use Symfony\Component\HttpFoundation\BinaryFileResponse;
use Symfony\Component\HttpFoundation\JsonResponse;
use Symfony\Component\HttpFoundation\Request;
use Symfony\Component\HttpFoundation\Response;
use Symfony\Component\HttpFoundation\ResponseHeaderBag;
use Symfony\Component\HttpFoundation\StreamedResponse;
use Symfony\Component\Security\Http\Authentication\AuthenticationUtils;

final class AppController extends AbstractController
{
    public function home(Request $request): Response
    {
        $session = $request->getSession();
        $session->set('visits', $session->get('visits', 0) + 1);
        $flash = implode(' ', $session->getFlashBag()->get('notice'));
        $user = $this->getUser()?->getUserIdentifier();

        return new Response(sprintf("<!doctype html><title>Home</title>%s<h1>Hello, %s!</h1><p>Visits in this session: %d.</p><p>%s</p>\n",
            $flash !== '' ? '<p class="flash">' . htmlspecialchars($flash) . '</p>' : '',
            htmlspecialchars($user ?? 'anonymous'), $session->get('visits'),
            $user !== null ? '<a href="/account">Account</a> <a href="/logout">Log out</a>' : '<a href="/login">Log in</a> (alice, bob or carol; password "secret")'));
    }

    public function login(AuthenticationUtils $auth): Response
    {
        $error = $auth->getLastAuthenticationError();

        return new Response(sprintf("<!doctype html><title>Log in</title><h1>Log in</h1>%s<form method=\"post\" action=\"/login\">"
            . "<input name=\"_username\" value=\"%s\"><input type=\"password\" name=\"_password\"><button>Log in</button></form>\n",
            $error !== null ? '<p class="error">' . htmlspecialchars($error->getMessageKey()) . '</p>' : '',
            htmlspecialchars($auth->getLastUsername())));
    }

    public function account(Request $request): Response
    {
        $request->getSession()->getFlashBag()->add('notice', 'You visited your account.');

        return new Response('<!doctype html><title>Account</title><h1>Account of ' . htmlspecialchars($this->getUser()->getUserIdentifier()) . "</h1>\n");
    }

    /** Who this session is, in JSON: what the tests compare between users. */
    public function whoami(Request $request): JsonResponse
    {
        $session = $request->hasPreviousSession() ? $request->getSession() : null;

        return new JsonResponse([
            'user' => $this->getUser()?->getUserIdentifier(),
            'visits' => $session?->get('visits', 0) ?? 0,
        ]);
    }

    /** A JSON API: the body is read from php://input. */
    public function apiEcho(Request $request): JsonResponse
    {
        $data = json_decode($request->getContent(), true);
        if (!\is_array($data) || !\is_string($data['text'] ?? null)) {
            return new JsonResponse(['error' => 'want a JSON object with a "text" string'], 422);
        }

        return new JsonResponse(['text' => $data['text'], 'length' => mb_strlen($data['text'])], 201);
    }

    public function streamed(): StreamedResponse
    {
        return new StreamedResponse(static function (): void {
            foreach (['one', 'two', 'three'] as $chunk) {
                echo $chunk, "\n";
                flush();
            }
        }, 200, ['Content-Type' => 'text/plain']);
    }

    public function download(): BinaryFileResponse
    {
        $response = new BinaryFileResponse(__DIR__ . '/../../templates/report.txt');
        $response->setContentDisposition(ResponseHeaderBag::DISPOSITION_ATTACHMENT, 'report.txt');

        return $response;
    }

    public function hello(): Response
    {
        return new Response('Hello, world!', 200, ['Content-Type' => 'text/plain']);
    }
}

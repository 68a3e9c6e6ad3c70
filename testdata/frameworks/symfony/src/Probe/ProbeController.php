<?php

declare(strict_types=1);

namespace App\Probe;

use Symfony\Component\HttpFoundation\Request;
use Symfony\Component\HttpFoundation\Response;
use Symfony\Component\Security\Core\Authentication\Token\Storage\TokenStorageInterface;
use Symfony\Component\Security\Core\Authentication\Token\UsernamePasswordToken;
use Symfony\Component\Security\Core\User\InMemoryUser;

final class ProbeController extends \Symfony\Bundle\FrameworkBundle\Controller\AbstractController
{
    public function __construct(private Memo $memo, private TokenStorageInterface $tokens)
    {
    }

    public function memoSet(Request $request): Response
    {
        $this->memo->value = $request->query->get('v');

        return new Response((string) $this->memo->value);
    }

    public function memoGet(): Response
    {
        return new Response($this->memo->value ?? 'none');
    }

    /** Authenticates the rest of this request as a user, without a session. */
    public function tokenSet(Request $request): Response
    {
        $user = new InMemoryUser((string) $request->query->get('v'), null, ['ROLE_USER']);
        $this->tokens->setToken(new UsernamePasswordToken($user, 'main', $user->getRoles()));

        return new Response($this->tokens->getToken()->getUserIdentifier());
    }

    public function tokenGet(): Response
    {
        return new Response($this->tokens->getToken()?->getUserIdentifier() ?? 'nobody');
    }

    public function exit(Request $request): Response
    {
        $this->memo->value = 'exited';
        echo 'bye';
        exit();
    }

    /** A bleed no reset sees: a static array of the app's own, filled per request. */
    public function staticSet(Request $request): Response
    {
        Registry::$seen[] = (string) $request->query->get('v');

        return new Response(implode(',', Registry::$seen));
    }

    /** Writes a line to the server's log: what the worker logged before it is there too. */
    public function mark(Request $request): Response
    {
        error_log('probe mark ' . $request->query->get('v'));

        return new Response('marked');
    }

    public function after(): Response
    {
        return new Response('answered before kernel.terminate');
    }
}

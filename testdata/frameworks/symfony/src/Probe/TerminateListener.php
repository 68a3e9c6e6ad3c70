<?php

declare(strict_types=1);

namespace App\Probe;

use Symfony\Component\EventDispatcher\EventSubscriberInterface;
use Symfony\Component\HttpKernel\Event\TerminateEvent;
use Symfony\Component\HttpKernel\KernelEvents;

// On kernel.terminate of /probe/after, waits for the file the test writes once it has the
// answer: had the answer waited for kernel.terminate, this would record "timeout".
final class TerminateListener implements EventSubscriberInterface
{
    public static function getSubscribedEvents(): array
    {
        return [KernelEvents::TERMINATE => 'onTerminate'];
    }

    public function onTerminate(TerminateEvent $event): void
    {
        if ($event->getRequest()->getPathInfo() !== '/probe/after') {
            return;
        }
        $dir = getenv('PROBE_DIR');
        $token = $event->getRequest()->query->get('token');
        $seen = 'timeout';
        for ($i = 0; $i < 2000; $i++) {
            if (is_file("{$dir}/go-{$token}")) {
                $seen = 'go';
                break;
            }
            usleep(10000);
        }
        file_put_contents("{$dir}/terminate-{$token}", "terminate {$seen}\n", FILE_APPEND);
    }
}

<?php
// A job consumer for the jobs tests. It appends one line per job it finishes to $JOB_LOG:
// "done ID ATTEMPT PID PAYLOAD-JSON", and one per job it begins: "start ID ATTEMPT PID".
// The payload says what to do: {"do": "ok" | "throw" | "die" | "die-once" | "sleep" | "exit" |
// "exit-text" | "fatal" | "user-fatal" | "oom", "ms": N}: die is a SIGKILL, exit and exit-text call exit(3) and
// die('...'), fatal calls an undefined function, user-fatal raises E_USER_ERROR, oom exhausts the
// memory limit (both fatal errors).
declare(strict_types=1);

require __DIR__ . '/../../php/autoload.php';

use Peregrine\Jobs\Job;

$log = (string) getenv('JOB_LOG');
$write = static function (string $line) use ($log): void {
    file_put_contents($log, $line . "\n", FILE_APPEND | LOCK_EX);
};

Peregrine\Worker::create()->consume(static function (Job $job) use ($write): void {
    $write("start {$job->id} {$job->attempt} " . getmypid());
    $do = is_array($job->payload) ? ($job->payload['do'] ?? 'ok') : 'ok';
    switch ($do) {
        case 'throw':
            throw new RuntimeException("failing on purpose, attempt {$job->attempt}");
        case 'die':
            posix_kill(getmypid(), SIGKILL);
            break;
        case 'die-once':
            if ($job->attempt === 1) {
                posix_kill(getmypid(), SIGKILL);
            }
            break;
        case 'exit':
            exit(3);
        case 'exit-text':
            die('leaving on purpose');
        case 'fatal':
            undefined_function_on_purpose();
            break;
        case 'user-fatal':
            trigger_error('fatal on purpose', E_USER_ERROR);
            break;
        case 'oom':
            ini_set('memory_limit', '16M');
            $hog = str_repeat('x', 32 << 20);
            break;
        case 'sleep':
            usleep(((int) ($job->payload['ms'] ?? 100)) * 1000);
            break;
    }
    $write("done {$job->id} {$job->attempt} " . getmypid() . ' ' . json_encode([$job->pipeline, $job->payload, $job->headers]));
});

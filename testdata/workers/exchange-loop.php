<?php
// A native worker script with a loop of its own that ends after LOOP_REQUESTS requests (1 by
// default), as scripts that recycle themselves do: the requests written to it after that must
// go to another worker, unread.
declare(strict_types=1);

$n = (int) (getenv('LOOP_REQUESTS') ?: 1);
for ($i = 0; $i < $n; $i++) {
    if (!peregrine_handle_request(function (): void {
        echo getmypid();
    })) {
        break;
    }
}

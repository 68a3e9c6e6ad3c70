<?php

return [
    'default' => 'peregrine',
    'connections' => [
        // The queue is the Peregrine pipeline's name.
        'peregrine' => ['driver' => 'peregrine', 'queue' => 'q', 'tries' => 1],
    ],
    'failed' => ['driver' => 'null'],
];

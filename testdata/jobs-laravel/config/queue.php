<?php

return [
    'default' => 'peregrine',
    'connections' => [
        // The queue is the Peregrine pipeline's name.
        'peregrine' => ['driver' => 'peregrine', 'queue' => 'q', 'tries' => 1],
    ],
    // The test creates the table in the app's SQLite database.
    'failed' => ['driver' => 'database-uuids', 'database' => 'sqlite', 'table' => 'failed_jobs'],
];

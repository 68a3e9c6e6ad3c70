<?php

// The messages the example's rules use (Laravel's skeleton ships the full file).
return [
    'required' => 'The :attribute field is required.',
    'email' => 'The :attribute must be a valid email address.',
    'file' => 'The :attribute must be a file.',
    'string' => 'The :attribute must be a string.',
    'max' => [
        'file' => 'The :attribute must not be greater than :max kilobytes.',
        'string' => 'The :attribute must not be greater than :max characters.',
    ],
    'uploaded' => 'The :attribute failed to upload.',
    'attributes' => [],
];

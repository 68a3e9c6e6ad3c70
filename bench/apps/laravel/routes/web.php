<?php

use Illuminate\Support\Facades\Route;

Route::get('/', function () {
    return response('Hello, world!', 200, ['Content-Type' => 'text/plain']);
});

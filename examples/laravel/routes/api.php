<?php

use App\Models\Note;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\Route;

Route::get('/notes', fn () => Note::orderBy('id')->get(['id', 'text']));

Route::post('/notes', function (Request $request) {
    $data = $request->validate(['text' => 'required|string|max:200']);

    return response()->json(Note::create(['text' => $data['text']])->only('id', 'text'), 201);
});

// The benchmark's route: no session, no view.
Route::get('/hello', fn () => response('Hello, world!', 200, ['Content-Type' => 'text/plain']));

<?php

use App\Http\Controllers\AuthController;
use App\Models\Note;
use Illuminate\Http\Request;
use Illuminate\Support\Facades\Auth;
use Illuminate\Support\Facades\Cookie;
use Illuminate\Support\Facades\Route;

Route::get('/', function (Request $request) {
    return view('home', [
        'user' => Auth::user(),
        'visits' => $request->session()->increment('visits'),
        'theme' => $request->cookie('theme', 'light'),
    ]);
});

Route::get('/login', [AuthController::class, 'form'])->name('login')->middleware('guest');
Route::post('/login', [AuthController::class, 'login'])->middleware('guest');
Route::post('/logout', [AuthController::class, 'logout']);

Route::get('/dashboard', function () {
    return view('dashboard', ['user' => Auth::user(), 'notes' => Note::where('user_id', Auth::id())->latest('id')->get()]);
})->middleware('auth');

Route::post('/notes', function (Request $request) {
    $data = $request->validate(['text' => 'required|max:200']);
    Note::create(['user_id' => Auth::id(), 'text' => $data['text']]);

    return redirect('/dashboard')->with('status', 'Note saved.');
})->middleware('auth');

// A JSON view of who this session is: what the tests compare between users.
Route::get('/whoami', function (Request $request) {
    return response()->json([
        'user' => Auth::user()?->email,
        'visits' => $request->session()->get('visits', 0),
        'flash' => $request->session()->get('status'),
    ]);
});

Route::post('/upload', function (Request $request) {
    $request->validate(['file' => 'required|file|max:1024']);
    $file = $request->file('file');
    $path = $file->store('uploads');

    return response()->json([
        'name' => $file->getClientOriginalName(),
        'size' => $file->getSize(),
        'sha1' => sha1_file(storage_path('app/' . $path)),
    ]);
})->middleware('auth');

Route::get('/theme/{theme}', function (string $theme) {
    Cookie::queue('theme', $theme, 60);

    return redirect('/');
})->where('theme', 'light|dark');

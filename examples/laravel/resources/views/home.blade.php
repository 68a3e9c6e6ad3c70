@extends('layout')
@section('title', 'Home')
@section('content')
<h1>Hello, {{ $user ? $user->name : 'guest' }}!</h1>
<p>Visits in this session: {{ $visits }}. Theme: {{ $theme }} (<a href="/theme/dark">dark</a>, <a href="/theme/light">light</a>).</p>
@if ($user)
<p><a href="/dashboard">Your notes</a></p>
<form method="post" action="/logout">@csrf<button>Log out</button></form>
@else
<p><a href="/login">Log in</a> (alice@example.com, bob@example.com or carol@example.com; password "secret")</p>
@endif
@endsection

@extends('layout')
@section('title', 'Log in')
@section('content')
<h1>Log in</h1>
@foreach ($errors->all() as $error)
<p class="error">{{ $error }}</p>
@endforeach
<form method="post" action="/login">
@csrf
<p><input name="email" value="{{ old('email') }}" placeholder="email"></p>
<p><input name="password" type="password" placeholder="password"></p>
<p><button>Log in</button></p>
</form>
@endsection

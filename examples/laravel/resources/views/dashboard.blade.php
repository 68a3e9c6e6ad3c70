@extends('layout')
@section('title', 'Dashboard')
@section('content')
<h1>{{ $user->name }}'s notes</h1>
@foreach ($errors->all() as $error)
<p class="error">{{ $error }}</p>
@endforeach
<ul>
@foreach ($notes as $note)
<li>{{ $note->text }}</li>
@endforeach
</ul>
<form method="post" action="/notes">@csrf<input name="text"><button>Add</button></form>
<form method="post" action="/upload" enctype="multipart/form-data">@csrf<input type="file" name="file"><button>Upload</button></form>
@endsection

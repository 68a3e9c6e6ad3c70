<!doctype html>
<html>
<head><title>@yield('title') - Peregrine Laravel example</title><link rel="stylesheet" href="/style.css"></head>
<body>
@if (session('status'))
<p class="flash">{{ session('status') }}</p>
@endif
@yield('content')
</body>
</html>

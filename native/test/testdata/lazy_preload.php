<?php
// Preloaded by TestServerSuperglobalWithoutJit: code that names the server superglobal and is
// never compiled in the worker.
function lazy_preloaded_uri(): string
{
    return $_SERVER['REQUEST_URI'];
}

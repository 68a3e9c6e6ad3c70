<?php
// Names the server superglobal: compiling this file makes the runtime register it.
return $_SERVER['REQUEST_URI'] . ' ' . $_SERVER['SERVER_SOFTWARE'];

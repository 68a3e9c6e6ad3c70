<?php
function declared_here(): string
{
    return 'function';
}
class DeclaredHere
{
}
echo declared_here(), ' ', DeclaredHere::class;

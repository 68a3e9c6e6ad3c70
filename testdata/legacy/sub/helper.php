<?php
function helper_name()
{
    return 'sub helper';
}
